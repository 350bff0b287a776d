"""The congestion mark on Mininet (p4src/README.md, "Congestion mark"; root): the 2-packet
queue case of RELIABILITY.md section 2 with ports and workers marking from one waiting
frame (`--mark-depth 1`), a re-plan that sends two sums per fragment into the PS link, every
result exact."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, MININET

from controller.emulation.faults.impair import congest
from controller.emulation.mininet_runner import Emulation
from controller.model.network import load_topology
from controller.solvers import solve

pytestmark = MININET


@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_marked_two_packet_queues_stay_exact_through_a_replan(target):
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    with Emulation(network, solve(network, "aro"), target=target, mark_depth=1) as emu:
        congest(emu, 0.3, 2)
        (before,) = emu.iterate(0.1, 1, timeout=90)

        def cut() -> None:
            emu.wait_for_traffic(packets=100)
            emu.set_link("L1", "S1", up=False)

        (after,) = emu.iterate(0.1, 2, timeout=90, during=cut)
        final = emu.state()
    marked = sum(r.get("marked", 0) for r in after.worker_reports.values())
    print(
        f"{target}: before the cut {before.seconds:.2f} s, {before.retransmissions} resends; "
        f"after {after.seconds:.2f} s, {after.retransmissions} resends, {marked} marked results"
    )
    assert before.exact and after.exact
    assert final["version"] == 2, f"one cut, plans: {final['replans']}"
    assert marked > 0, "no result came marked"
