"""The congestion mark on Mininet (p4src/README.md, "Congestion mark"; root): the 2-packet
queue case of RELIABILITY.md section 2 with ports and workers marking from half of their
own queue (the default: 1 of a `pfifo limit 2`; bmv2's switches from 32 of their own
64-packet queue), a re-plan that sends two sums per fragment into the PS link, every result
exact; and what recovery costs per frame the queues dropped, read from the qdiscs' drop
counters (`tc -s`), against the same run without marks."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, MININET

from controller.emulation.faults.impair import congest, mark_thresholds, queue_drops
from controller.emulation.mininet_runner import Emulation
from controller.model.network import load_topology
from controller.solvers import solve
from dataplane.frame import FRAME_LEN, K

pytestmark = MININET
NEVER = (1 << 19) - 1  # a depth no queue here reaches: marks off
CUT = frozenset({frozenset(("L1", "S1"))})


@pytest.mark.parametrize("marks", ["own queue", "off"])
@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_marked_two_packet_queues_stay_exact_through_a_replan(target, marks):
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    depth = None if marks == "own queue" else NEVER
    with Emulation(network, solve(network, "aro"), target=target, mark_depth=depth) as emu:
        congest(emu, 0.3, 2)
        thresholds = mark_thresholds(emu)
        start = queue_drops(emu)
        (before,) = emu.iterate(0.1, 1, timeout=90)
        middle = queue_drops(emu)
        kept = queue_drops(emu, skip=CUT)  # the link about to be cut left out

        def cut() -> None:
            emu.wait_for_traffic(packets=100)
            emu.set_link("L1", "S1", up=False)

        (after,) = emu.iterate(0.1, 2, timeout=90, during=cut)
        end = queue_drops(emu, skip=CUT)
        final = emu.state()
        # 2.5 x the seconds two sums per fragment take on the PS link (as test_dp_lossy)
        bound = 2.5 * 2 * -(-int(0.1 * 2**20) // 4 // K) * FRAME_LEN * 8 / (0.3 * emu.scale * 1e6)
    marked = sum(r.get("marked", 0) for r in after.worker_reports.values())
    # resends by cause (loss / timeout / CONTROL), then loss queries and NACKs
    keys = ("resent_on_loss", "resent_on_timeout", "resent_on_control", "queries", "nacks")
    causes = {
        name: "/".join(str(sum(r.get(k, 0) for r in it.worker_reports.values())) for k in keys)
        for name, it in (("before", before), ("after", after))
    }
    lost = {
        "before": {k: middle[k] - start[k] for k in start},
        "after": {k: end[k] - kept[k] for k in start},
    }
    per_lost = {
        name: it.retransmissions / max(1, sum(lost[name].values()))
        for name, it in (("before", before), ("after", after))
    }
    print(
        f"{target}, marks {marks}: before the cut {before.seconds:.2f} s, "
        f"{before.retransmissions} resends (loss/timeout/CONTROL/queries/NACKs "
        f"{causes['before']}), queues dropped {lost['before']} "
        f"({per_lost['before']:.2f} resends per frame); after {after.seconds:.2f} s "
        f"(bound {bound:.1f} s), "
        f"{after.retransmissions} resends ({causes['after']}), dropped {lost['after']} "
        f"({per_lost['after']:.2f} per frame), {marked} marked results; "
        f"marks from {thresholds}"
    )
    # half of each queue: 1 of the 2-packet pfifos, 32 of bmv2's own 64-packet queues
    own = "32" if target == "bmv2" else "1"
    assert set(thresholds["switch ports"]) == {own if depth is None else str(depth)}
    assert set(thresholds["worker ports"]) == {"1" if depth is None else str(depth)}
    assert before.exact and after.exact
    assert final["version"] == 2, f"one cut, plans: {final['replans']}"
    if marks == "own queue":
        assert marked > 0, "no result came marked"
