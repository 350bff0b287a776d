"""Exactly-once and prompt recovery under loss, duplication and reordering (RELIABILITY.md sec. 1),
without root: the real workers, PS and embedded switch pipelines of ARO Fig. 1 over simulated
impaired links on a virtual clock (`controller.emulation.faults.lossy_sim`), so bounds are on
virtual seconds, deterministic for a seed.

What each case caught before its fix (RELIABILITY.md section 1): 1 % loss hung in the first
iteration (late resends re-opened completed slots, a cycle between L2 and S1 renewed by
keepalives); 5 % loss took 49-101 s per iteration (lost fragments idled their place in the
window until a 0.5-1 s timeout, every timeout halved the window); 2 % duplication stalled the
second iteration for 50 s; 2-frame queues at 30 % of the workers' pace with a cut that sends
two sums per fragment into the PS link took 35-40 s until the queues marked congestion
(docs/reliability/congestion.md).
"""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, ROOT

from controller.emulation.faults.lossy_sim import (
    MBPS_PER_GBPS,
    Emulation,
    Impairments,
    Stalls,
    main,
)
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from dataplane.frame import FRAME_LEN, K
from dataplane.rto import MIN_RTO

# Sized in fragments: what an iteration pays once (its start, its last recoveries) is spread over
# as many fragments whatever K is; every slot of the job's region holds two of them.
GRADIENT_FRAGMENTS = 2048
GRADIENT_MB = GRADIENT_FRAGMENTS * 4 * K / 2**20


@pytest.fixture(scope="module")
def fig1():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "aro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1}))
    return network, plan


def _run(fig1, impair: Impairments, iterations: int, seed: int = 0) -> list:
    network, plan = fig1
    emulation = Emulation(network, impair, seed=seed, plan=plan)
    return [emulation.iteration(epoch, GRADIENT_MB, timeout=120) for epoch in range(iterations)]


def _exactly_once(it) -> None:
    assert it.seconds is not None, f"iteration {it.epoch} hung: {it.waiting}"
    assert all(it.exact), f"iteration {it.epoch}: a worker's sum is wrong"
    assert (it.finished, it.miscounted) == (it.fragments, 0)


@pytest.fixture(scope="module")
def unimpaired(fig1) -> float:
    (it,) = _run(fig1, Impairments(), 1)
    _exactly_once(it)
    assert it.resent_on_timeout + it.resent_on_loss + it.resent_on_control == 0
    return it.seconds


@pytest.fixture(scope="module")
def leaf_spine_16():
    network = load_topology(ROOT / "topologies" / "reliability" / "leaf-spine-4x4-16w.yaml")
    return network, solve(
        network, "aro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1})
    )


@pytest.mark.parametrize(
    ("impair", "bound"),
    [
        (Impairments(loss=0.01), 6.0),
        (Impairments(loss=0.05), 15.0),
    ],
    ids=["loss 1 %", "loss 5 %"],
)
def test_loss_on_every_link_is_recovered_exactly_within_a_bounded_slowdown(
    fig1, unimpaired, impair, bound
):
    (it,) = _run(fig1, impair, 1)
    _exactly_once(it)
    assert it.resent_on_loss > 0, "losses are found from later results, not only by timeouts"
    assert it.seconds <= bound * unimpaired, (
        f"{it.seconds:.1f} virtual s against {unimpaired:.2f} s without loss"
    )


def test_the_simulator_counts_what_each_link_dropped_and_the_resends_per_frame_lost(fig1):
    """Recovery's cost against what was lost: the frames the links dropped, by kind, and
    the workers' resends per frame dropped; nothing dropped, no ratio."""
    network, plan = fig1
    emulation = Emulation(network, Impairments(loss=0.01), seed=1, plan=plan)
    it = emulation.iteration(0, GRADIENT_MB, timeout=120)
    _exactly_once(it)
    dropped = sum(link.counts["lost"] for link in emulation.links.values())
    assert sum(it.lost.values()) == dropped > 0
    assert it.lost["contributions"] > 0 and it.lost["results"] > 0
    cost = it.recovery()
    assert cost["frames_lost"] == dropped and cost["resends"] == it.resends > 0
    assert cost["resends_per_lost_frame"] == round(it.resends / dropped, 3)
    (clean,) = _run(fig1, Impairments(), 1)
    assert clean.recovery()["resends_per_lost_frame"] is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stalled_agents_without_loss_resend_at_most_half_a_percent(fig1, seed):
    """A loaded machine holds processes off the CPU and the senders drift apart. Their
    windows of consecutive fragments never share a slot (the slot is the id mod the region),
    so nothing collides and nothing is resent: with a CRC-32 of the id as the slot, seeds 0
    and 2 resent 69 and 159 fragments here (0.7 and 1.6 %), every one of them spurious."""
    network, plan = fig1
    stalled = Emulation(network, seed=seed, plan=plan, stalls=Stalls(2.0, 0.03))
    it = stalled.iteration(0, GRADIENT_MB, timeout=120)
    _exactly_once(it)
    assert sum(it.lost.values()) == 0
    assert it.resends <= 0.005 * it.fragments * len(it.exact), it.resends


def test_five_percent_loss_at_a_megabyte_costs_a_few_unimpaired_iterations_not_twenty(fig1):
    """At 1 MB (8192 fragments of 32 elements when measured; 2048 of K = 128) the workers'
    windows have time to drift apart: the worker behind its peers measures millisecond round
    trips, and halving its window once per round trip for the tree's losses kept it at window
    1-3 while the others ran seconds ahead until their partial sums went stale: 146.5 virtual s
    against 6.6 s unimpaired (seed 0), fragments timed out up to 17 times. Halving at most
    every CUT_FLOOR: 25.8 s."""
    network, plan = fig1
    clean, lossy = (
        Emulation(network, impair, seed=0, plan=plan).iteration(0, 1.0, timeout=300)
        for impair in (Impairments(), Impairments(loss=0.05))
    )
    _exactly_once(clean)
    _exactly_once(lossy)
    assert lossy.seconds <= 6 * clean.seconds, (
        f"{lossy.seconds:.1f} virtual s against {clean.seconds:.2f} s without loss"
    )


@pytest.mark.parametrize(
    "impair",
    [Impairments(duplicate=0.02), Impairments(reorder=0.1)],
    ids=["duplicate 2 %", "reorder 10 %"],
)
def test_duplication_and_reordering_do_not_stall(fig1, unimpaired, impair):
    for it in _run(fig1, impair, 2):
        _exactly_once(it)
        assert it.seconds <= 1.5 * unimpaired, (
            f"iteration {it.epoch}: {it.seconds:.1f} virtual s against {unimpaired:.2f} s"
        )


# The congestion case (tests/test_reliability.py, 2-packet-queue): every link at 30 % of
# what the workers pace at (`controller.emulation.faults.impair.congest(emu, 0.3, 2)`: links at 0.3
# x MBPS_PER_GBPS per model Gbps, pfifo of 2 frames), 820-fragment iterations, then L1-S1 cut.
# Sized in fragments, not MB: the start costs a hundred frame times or more whatever K is (the
# first windows overflow the queues, marks cut them, they regrow); at 205 fragments (0.1 MB at
# K = 128) that was half the link time: 2.37 virtual s against 1.57, at 820 fragments 1.32x.
CONGESTED_MBPS_PER_GBPS = 0.3 * MBPS_PER_GBPS
CONGESTED_FRAGMENTS = 820
CONGESTED_MB = CONGESTED_FRAGMENTS * 4 * K / 2**20


def _link_seconds(sums_per_fragment: int) -> float:
    """Seconds the PS link needs for every fragment's sums at the congested rate: what the
    plan's tree cannot beat, computed from frame size and link rate alone."""
    frames = sums_per_fragment * CONGESTED_FRAGMENTS
    return frames * FRAME_LEN * 8 / (CONGESTED_MBPS_PER_GBPS * 1e6)


def test_two_packet_queues_at_a_third_of_the_pace_cost_little_before_a_cut(fig1):
    network, plan = fig1
    emulation = Emulation(network, plan=plan, mbps_per_gbps=CONGESTED_MBPS_PER_GBPS, queue=2)
    for epoch in (1, 2):
        it = emulation.iteration(epoch, CONGESTED_MB, timeout=90)
        _exactly_once(it)
        assert it.seconds <= 1.5 * _link_seconds(1), f"iteration {epoch}: {it.seconds:.1f} s"


@pytest.mark.parametrize("cut_after", [0.3, 0.6, 1.0], ids=lambda s: f"cut at {s} s")
def test_two_packet_queues_and_a_cut_two_sums_into_the_ps_link_recover_promptly(fig1, cut_after):
    """After the re-plan two sums per fragment share the 2-packet PS link, which the workers
    outpace 3.2 times. With loss their only rate signal, bursts overflowed it while it idled
    two thirds of the time and all five workers resent each loss: 35-40 virtual s against
    4.2 s of link time (paced by hand at the link's rate: 10.2-11.2 s). The queues mark from
    one waiting frame (half their capacity), the PS echoes the marks and the workers cut,
    grow and pace as DCTCP (dataplane/congestion.py): 7.6 / 7.0 / 6.5 virtual s at 32 elements
    per fragment and 0.1 MB, 18.3 / 19.3 / 19.2 s (1.46-1.54 times the link time) at the
    820 fragments of K = 128, with 0.8-1.0 resends per frame the queues dropped (2.5 without
    loss queries)."""
    network, plan = fig1
    emulation = Emulation(network, plan=plan, mbps_per_gbps=CONGESTED_MBPS_PER_GBPS, queue=2)
    for epoch in (1, 2):
        _exactly_once(emulation.iteration(epoch, CONGESTED_MB, timeout=90))
    emulation.cut("L1", "S1", after=cut_after)
    it = emulation.iteration(3, CONGESTED_MB, timeout=90)
    _exactly_once(it)
    assert emulation.version == 2
    assert it.seconds <= 2.5 * _link_seconds(2), (
        f"{it.seconds:.1f} virtual s against {_link_seconds(2):.1f} s of PS-link time"
    )
    # A dropped sum holds 1.4-1.8 contributions, and each contributor resending on its own
    # detection made 2.5-2.8 resends per dropped frame; loss queries resend it once.
    dropped = sum(it.queue_drops.values())
    assert it.resends <= 1.5 * dropped, f"{it.resends} resends for {dropped} frames dropped"


def test_what_reaches_the_ps_is_counted_as_the_link_delivered_it(fig1):
    """`ps_intake` (docs/reliability/journal.md, "What the link into the PS carries") sorts each
    frame the PS receives; the link into the PS counts deliveries on its own. Congested, with a
    cut: every kind of frame occurs, and the two counts must agree."""
    network, plan = fig1
    emulation = Emulation(network, plan=plan, mbps_per_gbps=CONGESTED_MBPS_PER_GBPS, queue=2)
    into_ps = [
        link
        for (_, v), link in emulation.links.items()
        if not network.is_switch(v) and network.role(v) == "ps"
    ]
    emulation.cut("L1", "S1", after=0.2)
    before = sum(link.counts["delivered"] for link in into_ps)
    it = emulation.iteration(1, 0.05, timeout=90)
    _exactly_once(it)
    assert sum(it.ps_intake.values()) == sum(link.counts["delivered"] for link in into_ps) - before
    assert it.ps_intake["new_sums"] >= it.fragments  # a second sum per fragment after the cut
    assert it.tail_drops_into_ps > 0


def test_the_simulator_command_cuts_a_link_and_refuses_one_the_topology_lacks(capsys):
    args = ["--link-scale", "0.3", "--queue", "2", "--iterations", "2", "--gradient-mb", "0.02"]
    assert main([*args, "--cut", "L1-S1", "--cut-after", "0.2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert '"plan_version": 2' in last and '"exact": true' in last
    for wrong in (
        ["--cut", "L1-S9"],
        ["--loss", "5"],
        ["--queue", "0"],
        ["--topology", str(ROOT / "README.md")],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*args, *wrong])
        assert exit_.value.code == 2
        assert "error" in capsys.readouterr().err


def test_sixteen_workers_under_loss_finish_with_a_timeout_of_their_round_trip(leaf_spine_16):
    """4 leaves, 4 spines, 16 workers, 5 % loss on every link: nearly every fragment needs
    some contributor's recovery, so a fragment sent once is often answered only after a peer
    timed out. Sampled, those answers grew the RTOs (0.5 s to 3.5 s within 20 virtual s, round
    trips being tens of milliseconds), each stuck window waited that long, the next samples
    grew longer: 0.1 MB hung at 530 of 820 fragments, 0.05 MB took 283 virtual s (Mininet: a
    hang with RTOs of 2.6-10 s). A result completed by a retransmission says so (`aux`), and
    the workers do not sample it: 44-58 virtual s for seeds 0-2. Those 44 s (seed 0) were the
    windows drifting apart (see the megabyte test above); halving at most every CUT_FLOOR:
    5.5 s."""
    network, plan = leaf_spine_16
    it = Emulation(network, Impairments(loss=0.05), plan=plan).iteration(0, 0.05, timeout=120)
    _exactly_once(it)
    assert max(it.rto) <= 2 * MIN_RTO, f"RTOs {sorted(it.rto)}"
    assert it.seconds <= 15, f"{it.seconds:.1f} virtual s"


def test_sixteen_workers_at_five_percent_loss_take_no_stalled_peer_for_a_round_trip(leaf_spine_16):
    """A quarter megabyte, 16 workers, 5 % loss on every link. A result that a peer's DATA
    completed waited for that peer to send it, seconds late when the peer's window had
    stalled. Sampled whole, those waits grew the RTOs to MAX_RTO, each recovery waited that
    long, and more windows stalled: 59 of 2048 fragments were missing after 60 virtual s (seed
    1: 893). Sampled at most at PEER_WAIT_CAP times the worker's own round trip (the results
    its own DATA completed): 22.0 virtual s, largest RTO 0.61 s (seeds 1 and 2: 18.7 and
    22.9 s). With congestion marks on and results sent only toward workers, seed 0 was an
    outlier (51.5 virtual s; 22.5 s with marks off): one burst of marks from recovery traffic
    queued into the PS held every later regrowth to one per window; workers now forget the
    cut's window after QUIET_WINDOWS unmarked windows (31.4 s). The bound is on the median of
    seeds 0-2, every seed still exact (docs/reliability/congestion.md). Frames of K = 128 take
    three times as long: workers whose DATA never came last took their least sample, itself a
    wait, as their own round trip (median 6.3x, 3 of 10 seeds 15-30x at 512 fragments); the
    NACKs of first loss queries now give them one (test_dp_nack)."""
    network, plan = leaf_spine_16
    clean = Emulation(network, plan=plan).iteration(0, GRADIENT_MB, timeout=60)
    _exactly_once(clean)
    runs = []
    for seed in range(3):
        emulation = Emulation(network, Impairments(loss=0.05), plan=plan, seed=seed)
        it = emulation.iteration(0, GRADIENT_MB, timeout=120)
        _exactly_once(it)
        runs.append(it)
    seconds = sorted(it.seconds for it in runs)
    assert seconds[1] <= 6 * clean.seconds, (
        f"{seconds} virtual s against {clean.seconds:.1f} s without loss"
    )
    rtos = sorted(max(it.rto) for it in runs)
    assert rtos[1] <= 2 * MIN_RTO, f"largest RTO per seed {rtos}"


def test_sixteen_workers_at_five_percent_loss_resend_little_on_a_timeout(leaf_spine_16):
    """A contribution's loss is found by later results, and with 16 contributors those wait
    for every peer: the loser learnt it about an RTO late, and its peers, which sent earlier,
    timed out first and resent what their first hop held (seed 0, a quarter megabyte: 3 274 of
    14 359 resends on a timeout, 90 % of the fragments that timed out completed by a peer's
    resend, 27.4 virtual s). A first timeout sends a loss query instead (Worker.on_timeouts):
    58 of 10 187, 22.1 s."""
    network, plan = leaf_spine_16
    it = Emulation(network, Impairments(loss=0.05), plan=plan).iteration(
        0, GRADIENT_MB, timeout=120
    )
    _exactly_once(it)
    assert it.resent_on_timeout <= 0.05 * it.resends, (it.resent_on_timeout, it.resends)
    assert it.recovery()["resends_per_lost_frame"] <= 1.5


SLOW_SERVICE = 0.0005  # seconds a switch spends per frame: CPU-starved Python switches


def test_slow_switches_slow_the_workers_down_without_a_resend_storm(leaf_spine_16):
    """No loss, but every switch takes 0.5 ms per frame: round trips grow past the RTO and
    past BACKOFF_CEILING, every fragment times out and Karn's rule samples none; the lost
    fragments' keepalives (a resend every BACKOFF_CEILING whatever the window) and the
    timeouts' resends lengthened the queues further: 458 of 820 fragments after 60 virtual s,
    59 588 resends on timeout. Bound from the topology alone: L1 aggregates nothing and
    forwards each fragment's contribution and result of each of its workers, so no plan beats
    that many frames per fragment x 0.5 ms (4.1 s here)."""
    network, plan = leaf_spine_16
    it = Emulation(network, plan=plan, service=SLOW_SERVICE).iteration(0, 0.1, timeout=60)
    _exactly_once(it)
    workers_on_l1 = sum(
        network.role(h) == "worker"
        for h in network.graph.predecessors("L1")
        if not network.is_switch(h)
    )
    service_bound = 2 * workers_on_l1 * it.fragments * SLOW_SERVICE
    assert it.seconds <= 2 * service_bound, f"{it.seconds:.1f} virtual s"
    assert it.resent_on_timeout <= it.fragments, f"{it.resent_on_timeout} resends"
