"""Job isolation on a shared switch (p4src/README.md step 2b, "Threat model"), on both targets.

Job A (workers on ports 1 and 2, PS on port 4) and job B (a worker on port 3) share one
switch. The host on port 3 forges job A's packets, built with scapy: A's job id, task, flow
ids and fragment ids, as DATA, ACK, PROBE and RESULT. With the ports bound to their jobs (what
the controller installs) A's sum is exact, nothing forged reaches A's hosts and every forgery
is counted in `forged[A]`; without the binding the same frames do change A's result, which is
what shows that the binding, and nothing else, protects it.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import test_dp_target
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from test_dp_target import (
    HOSTS,
    OUT_FLOW,
    TASK,
    Client,
    Target,
    _elements,
    _frame,
    _install_aggregation,
    _receive,
    _values,
)

from dataplane.frame import (
    ACK,
    BROADCAST,
    DATA,
    INA_UDP_PORT,
    PROBE,
    RESULT,
    WITH_ELEMENTS,
    InaHeader,
    kind_of,
)
from dataplane.packet import INA

pytestmark = pytest.mark.root
JOB_A, JOB_B = 3, 4  # JOB_A is test_dp_target's JOB, which `_install_aggregation` uses
FORGER = 3  # the port (and host) of job B's worker
GROUP = 8
# The switch fixtures of the contract tests: one switch of each kind for this module.
target = test_dp_target.target
sw = test_dp_target.sw


def _bind(sw: Client, jobs: dict[int, int]) -> None:
    """What the controller installs: every host port, and the job of the host behind it."""
    sw.write(
        *(sw.table_entry("host_port", {"ingress_port": p}, "mark_host_port") for p in jobs),
        *(
            sw.table_entry("host_job", {"ingress_port": p, "job": j}, "permit_job")
            for p, j in jobs.items()
        ),
    )


def _forged(flags: int, frag: int, flow: int, job: int = JOB_A, seed: int = 666) -> bytes:
    """A frame from the forger's host claiming `job`'s task, `flow` and fragment `frag`; a
    RESULT to every worker, as the PS sends it."""
    src, dst = HOSTS[FORGER], (BROADCAST if flags == RESULT else HOSTS[5])
    packet = (
        Ether(src=src.mac, dst=dst.mac)
        / IP(src=".".join(map(str, src.ip)), dst=".".join(map(str, dst.ip)))
        / UDP(sport=flow, dport=INA_UDP_PORT, chksum=0)
        / INA(
            job=job,
            task=TASK,
            flags=flags,
            flow_id=flow,
            next_node=77,
            frag_id=frag,
            count=1 if flags == DATA else 2,
            elements=[int(v) for v in _elements(seed)] if flags in WITH_ELEMENTS else [],
        )
    )
    return bytes(packet)


def _setup(sw: Client, *, bound: bool) -> None:
    _install_aggregation(sw, {1: 0, 2: 0})
    sw.write(
        sw.group(GROUP, [1, 2]),
        sw.table_entry(
            "result_multicast", {"job": JOB_A, "task": TASK}, "set_result_group", group=GROUP
        ),
    )
    if bound:
        _bind(sw, {1: JOB_A, 2: JOB_A, FORGER: JOB_B, 4: JOB_A})


def _attack_then_aggregate(target: Target) -> tuple[list[bytes], list[bytes], int]:
    """Worker 1 contributes to fragment 9; the forger sends A's flow 2 (which would complete
    the sum with its own elements), an ACK (which would free the slot), a PROBE and a fake
    RESULT; then worker 2 contributes. Returns (what reached the PS, what reached A's
    workers, forged frames sent). The pauses fix the order (a switch serves ports in turn)."""
    frag = 9
    target.sockets[1].send(_frame(1, frag, 1, _elements(1)))
    time.sleep(0.1)
    forged = [
        _forged(DATA, frag, 2),
        _forged(ACK, frag, 1),
        _forged(PROBE, frag, 1),
        _forged(RESULT, frag, OUT_FLOW),
    ]
    for frame in forged:
        target.sockets[FORGER].send(frame)
    time.sleep(0.2)
    target.sockets[2].send(_frame(2, frag, 2, _elements(2)))
    at_ps = _receive(target.sockets[4], wait=1.0)
    at_workers = _receive(target.sockets[1], wait=0.2) + _receive(target.sockets[2], wait=0.2)
    return at_ps, at_workers, len(forged)


def test_a_host_cannot_forge_another_jobs_packets(target: Target, sw: Client) -> None:
    _setup(sw, bound=True)
    at_ps, at_workers, sent = _attack_then_aggregate(target)
    assert [InaHeader.unpack(f).flags for f in at_ps] == [DATA], (
        "only A's completed sum may reach A's PS"
    )
    np.testing.assert_array_equal(_values(at_ps[0]), _elements(1) + _elements(2))
    assert InaHeader.unpack(at_ps[0]).count == 2
    assert at_workers == [], "a forged RESULT reached job A's workers"
    forged = sw.counter("forged")
    assert forged[JOB_A] == sent and sum(forged) == sent
    assert sw.counter("duplicates") == [0, 0, 0, 0]
    assert sw.counter("aggregations_completed") == [1, 0, 0, 0]


def test_without_the_binding_the_same_forgery_changes_the_result(
    target: Target, sw: Client
) -> None:
    """The control experiment: the forged flow-2 contribution completes A's sum with the
    forger's elements and the fake RESULT reaches A's workers."""
    _setup(sw, bound=False)
    at_ps, at_workers, _ = _attack_then_aggregate(target)
    sums = [f for f in at_ps if kind_of(InaHeader.unpack(f).flags) == DATA]
    assert sums and not np.array_equal(_values(sums[0]), _elements(1) + _elements(2))
    assert any(kind_of(InaHeader.unpack(f).flags) == RESULT for f in at_workers)
    assert sum(sw.counter("forged")) == 0


def test_own_job_id_with_the_other_jobs_task_flow_and_fragment_reaches_nothing_of_it(
    target: Target, sw: Client
) -> None:
    """Keeping its own job id, the forger only reaches job B's entries (here: none, so the
    frames are `unknown_job`); job A's slot and result are untouched."""
    _setup(sw, bound=True)
    target.sockets[1].send(_frame(1, 9, 1, _elements(1)))
    time.sleep(0.1)
    for flags, flow in ((DATA, 2), (ACK, 1), (RESULT, OUT_FLOW)):
        target.sockets[FORGER].send(_forged(flags, 9, flow, job=JOB_B))
    time.sleep(0.2)
    target.sockets[2].send(_frame(2, 9, 2, _elements(2)))
    at_ps = _receive(target.sockets[4], wait=1.0)
    assert len(at_ps) == 1
    np.testing.assert_array_equal(_values(at_ps[0]), _elements(1) + _elements(2))
    assert _receive(target.sockets[1], wait=0.2) == []
    assert sw.counter("unknown_job") == [3, 0, 0, 0] and sum(sw.counter("forged")) == 0


def test_a_job_id_beyond_the_counter_is_counted_in_cell_0(target: Target, sw: Client) -> None:
    _setup(sw, bound=True)
    target.sockets[FORGER].send(_forged(DATA, 1, 1, job=1000))
    assert _receive(target.sockets[4], wait=0.3) == []
    assert sw.counter("forged")[0] == 1
