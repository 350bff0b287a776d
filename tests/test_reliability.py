"""Faults at run time on Mininet (RELIABILITY.md): congestion is not a link failure; loss,
duplication and reordering on every link leave every result exact (root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES, MININET

from controller.emulation.faults.impair import (
    TABLE_PREFIX,
    Impairment,
    LinkImpairments,
    congest,
    remove_leftover_tables,
)
from controller.emulation.mininet_runner import Emulation
from controller.model.network import load_topology
from controller.solvers import solve

pytestmark = MININET


@pytest.fixture(scope="module")
def fig1():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    return network, solve(network, "aro")


@pytest.mark.parametrize("queue", [None, 2], ids=["default-queue", "2-packet-queue"])
def test_congestion_is_not_a_failure_but_a_cut_under_it_is(fig1, queue):
    """Every link at 30 % of what the workers pace at: with the default 1000-packet queues
    probes wait seconds (probes alone re-planned 22 times in 4 iterations), with
    2-packet queues they are dropped; the ports keep receiving, so the plan stays. A real cut
    under the same load still makes exactly one new plan."""
    network, plan = fig1
    with Emulation(network, plan) as emu:
        congest(emu, 0.3, queue)
        results = [emu.iterate(0.1, k, timeout=90)[0] for k in (1, 2)]
        congested = emu.state()

        def cut() -> None:
            emu.wait_for_traffic(packets=100)
            emu.set_link("L1", "S1", up=False)

        (after_cut,) = emu.iterate(0.1, 3, timeout=90, during=cut)
        time.sleep(3)  # a second, false verdict would come within a few probe rounds
        final = emu.state()
    assert [it.exact for it in results] == [True, True]
    if queue is not None:  # 1000-packet queues delay but need not drop: no resend is due
        assert sum(it.retransmissions for it in results) > 0, "congestion dropped nothing"
    assert congested["version"] == 1, f"re-planned without a failure: {congested['replans']}"
    assert after_cut.exact
    assert final["version"] == 2, f"one cut, plans: {final['replans']}"
    assert final["dead_links"] == [["L1", "S1"]]
    print(
        "probes lost but counters moving (link-rounds):", final["link_monitor"]["saved_by_traffic"]
    )


@pytest.mark.parametrize(
    "impairment",
    [Impairment("loss", 5), Impairment("duplicate", 5), Impairment("reorder", 10, delay_ms=20)],
    ids=lambda i: i.kind,
)
def test_every_link_impaired_every_result_exact_each_fragment_once(fig1, impairment):
    network, plan = fig1
    with Emulation(network, plan) as emu, LinkImpairments(emu, impairment) as faults:
        results = [emu.iterate(0.1, k, timeout=90)[0] for k in (1, 2)]
        chains = faults.counters()
        state = emu.state()
    check_impaired_run(impairment, results, chains, faults, state)


@pytest.mark.parametrize(
    "impairment",
    [Impairment("loss", 5), Impairment("duplicate", 5), Impairment("reorder", 10)],
    ids=lambda i: i.kind,
)
def test_an_impaired_link_does_to_numbered_frames_what_it_says(impairment):
    """Measured at the receiver, independently of the rules' own counters."""
    from controller.emulation.faults.calibrate import calibrate

    got = calibrate(impairment, frames=3000)
    rate = {
        "loss": got["lost_percent"],
        "duplicate": got["copies_percent"],
        "reorder": got["reordered_percent"],
    }[impairment.kind]
    assert 0.6 * impairment.percent < rate < 1.4 * impairment.percent, got
    others = {
        "loss": ("copies", "reordered"),
        "duplicate": ("lost", "reordered"),
        "reorder": ("lost", "copies"),
    }[impairment.kind]
    assert all(got[k] == 0 for k in others), got


def test_long_run_with_a_restart_and_a_cut_stays_exact(fig1):
    """The CI-sized item 6: with every=2, S1 restarted at iterations 1 and 3 and L1-S1 cut at
    2 and 4 (mended after each), all mid-transfer. Every result exact, every fault done, the
    memory of every process recorded."""
    from controller.emulation.faults.longrun import long_run

    network, plan = fig1
    with Emulation(network, plan) as emu:
        record = long_run(
            emu, iterations=4, every=2, gradient_mb=0.05, timeout=90, cut=("L1", "S1"), restart="S1"
        )
    check_long_run_of_four(record, network, plan)
    # A re-plan only for a real failure: each cut moves the plan, its mend moves it back; a
    # restart (back within the daemon's grace) keeps it, and no untouched link ever dies.
    # Versions: 1, the cut at 2, its mend, the cut at 4, maybe its mend (after the run).
    assert record["plan_versions"] in (4, 5), record["replans"]
    cut, mended = [["L1", "S1"]], []
    kinds = [r["dead_links"] for r in record["replans"]]  # a re-plan is listed after its drain
    assert kinds == [cut, mended, cut, mended][: len(kinds)] and len(kinds) >= 2, kinds
    print("RSS kB:", record["rss_kb"], "agent peaks kB:", record["agent_peak_rss_kb"])


def check_impaired_run(impairment, results, chains, faults, state) -> float:
    """Item 1's assertions, shared with test_reliability_bmv2.py: every result exact, each
    fragment finished and counted once, the rule hit at about its rate, the impairment seen at
    work (resends, ignored copies, held frames), and no re-plan. Returns the rule's hit %."""
    assert all(it.exact for it in results)
    for it in results:
        assert it.ps_report["finished"] == it.ps_report["fragments"], "a fragment never completed"
        assert it.ps_report["miscounted"] == 0, "a contribution was counted twice or missed"
    seen = sum(c["seen"] for c in chains.values())
    hit = sum(c["hit"] for c in chains.values())
    assert 0.5 * impairment.percent < 100 * hit / seen < 1.5 * impairment.percent
    if impairment.kind == "loss":
        assert sum(it.retransmissions for it in results) > 0
    elif impairment.kind == "duplicate":  # copies reached a slot or the PS and were ignored
        switch_dups = sum(
            sum(s["counters"].get("duplicates", [])) for s in state["switches"].values()
        )
        assert switch_dups + sum(it.ps_report["duplicates_ignored"] for it in results) > 0
    else:  # frames held back and sent later; every frame a delay line read accounted for
        assert sum(s["sent"] for s in faults.delayline_stats.values()) > 0
        for link in faults.delayline_stats.values():
            assert link["held"] == link["sent"] + link["refused_by_link"] + link["held_at_stop"]
    assert state["version"] == 1, "an impaired link is not a dead one"
    return 100 * hit / seen


def check_long_run_of_four(record: dict, network, plan) -> None:
    """Item 6's assertions on a 4-iteration long run with every=2, shared with
    test_reliability_bmv2.py: every result exact, the faults done in order, without error, the
    memory of every process recorded."""
    assert record["exact"] and record["exact_count"] == 4, record["iterations"]
    assert all(
        i["finished"] == i["fragments"] and i["miscounted"] == 0 for i in record["iterations"]
    ), record["iterations"]
    assert [(e["iteration"], e["event"]) for e in record["events"]] == [
        (1, "restart"),
        (2, "cut"),
        (3, "restart"),
        (4, "cut"),
    ]
    assert not [e for e in record["events"] if "error" in e], record["events"]
    assert all(e["repush_seconds"] > 0 for e in record["events"] if e["event"] == "restart")
    assert all(e["cut_to_new_plan_seconds"] > 0 for e in record["events"] if e["event"] == "cut")
    agents = {f"worker {w}" for w in plan.tasks[0].paths} | {f"PS {plan.tasks[0].ps}"}
    assert set(record["agent_peak_rss_kb"]) == agents
    assert all(len(s) == 4 for s in record["agent_peak_rss_kb_per_iteration"].values())
    switches = {f"switch {s}" for s in network.switches}
    assert switches | {"controller", "bench (Mininet)"} == set(record["rss_kb"])
    assert all(v["start"] > 0 and v["end"] > 0 for v in record["rss_kb"].values())


def test_an_interrupted_runs_impairment_does_not_outlive_it(fig1):
    """A table a killed run left behind hooks its chains by device name, so the kernel
    attaches them to the next emulation's interfaces of that name
    (controller/emulation/faults/impair.py): this one drops every frame S1's first port sends. The
    next emulation removes it first."""
    table = f"{TABLE_PREFIX}leftover"  # a name the sweep owns, as LinkImpairments' are
    nft = [
        "nft",
        "add",
        "chain",
        "netdev",
        table,
        "c",
        '{ type filter hook egress device "s1-eth1" priority 0; drop; }',
    ]
    subprocess.run(["nft", "add", "table", "netdev", table], check=True)
    try:
        subprocess.run(nft, check=True)
        network, plan = fig1
        with Emulation(network, plan) as emu:
            listed = subprocess.run(
                ["nft", "list", "tables"], capture_output=True, text=True, check=True
            ).stdout
            (it,) = emu.iterate(0.05, 1, timeout=60)
        assert table not in listed
        assert it.exact
    finally:
        remove_leftover_tables()


def _left_running() -> list[str]:
    """Command lines of an emulation's processes: switches (their `-i PORT@INTERFACE`),
    controller and agents (files in the emulation's work directory), and no one else's."""
    pattern = r"(controller\.cli|-m dataplane|simple_switch).*(ina-mininet-|[0-9]@[^ ]+-eth[0-9])"
    found = subprocess.run(
        ["pgrep", "-af", pattern], capture_output=True, text=True, check=False
    ).stdout
    return found.splitlines()


def _impairment_tables() -> list[str]:
    listed = subprocess.run(
        ["nft", "list", "tables"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in listed.splitlines() if TABLE_PREFIX in line]


def test_a_run_stopped_by_sigterm_leaves_nothing_behind(tmp_path):
    """`kill` on a run with impaired links (a CI job's timeout does the same): its nft
    tables, switches, controller and agents go with it (Emulation._unwind_on_sigterm).
    Killed outright, a run left its tables hooked on the interface names the next emulation
    reuses, and its processes running."""
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:  # a file, not a pipe nobody reads while it runs
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "bench",
                "reliability",
                "--item",
                "loss",
                "--impairment",
                "loss:5",
                "--iterations",
                "1",
                "--gradient-mb",
                "4",
                "--timeout",
                "300",
                "--out",
                str(tmp_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 180
        while not (_impairment_tables() and any(" worker " in p for p in _left_running())):
            assert run.poll() is None, errors.read_text()[-800:]
            assert time.monotonic() < deadline, "the run never started its impaired iteration"
            time.sleep(0.5)
        time.sleep(2)  # in the middle of the iteration
        run.send_signal(signal.SIGTERM)
        code = run.wait(timeout=120)
        left_tables, left_running = _impairment_tables(), _left_running()
    finally:
        if run.poll() is None:
            run.kill()
        if _left_running() or remove_leftover_tables():  # the next tests start clean
            for line in _left_running():
                os.kill(int(line.split()[0]), signal.SIGKILL)
            subprocess.run(["mn", "-c"], capture_output=True, check=False)
    assert code == 128 + signal.SIGTERM
    assert left_tables == []
    assert left_running == []


def test_a_row_stopped_mid_way_is_resumed_with_only_the_iterations_it_lacks(tmp_path):
    """One row of 20 × 4 MB on the 4-leaf/4-spine takes hours: stopped after an
    iteration, `--resume` keeps what the journal holds and runs only the rest, on a fresh
    emulation (controller.tools.bench.loss_journal)."""
    argv = [
        sys.executable,
        "-m",
        "controller.cli",
        "bench",
        "reliability",
        "--item",
        "loss",
        "--impairment",
        "none",
        "--iterations",
        "3",
        "--gradient-mb",
        "0.5",
        "--timeout",
        "120",
        "--out",
        str(tmp_path),
    ]
    journal = tmp_path / "loss.jsonl"

    def iterations() -> list[dict]:
        lines = journal.read_text().splitlines() if journal.exists() else []
        return [json.loads(line)["iteration"] for line in lines if '"iteration"' in line]

    with (tmp_path / "stderr").open("w") as stderr:
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 180
        while not iterations():
            assert run.poll() is None, (tmp_path / "stderr").read_text()[-800:]
            assert time.monotonic() < deadline, "no iteration ended"
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if run.poll() is None:
            run.kill()
    before = iterations()
    assert 1 <= len(before) < 3 and not (tmp_path / "loss.json").exists()

    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr[-800:]
    assert f"from iteration {len(before) + 1}" in resumed.stdout
    ran = [line for line in resumed.stdout.splitlines() if "none: iteration" in line]
    assert len(ran) == 3 - len(before), resumed.stdout
    row = json.loads((tmp_path / "loss.json").read_text())["runs"][0]["runs"]["none"]
    assert row["iterations_completed"] == 3 and row["exact"]
    assert row["seconds"][: len(before)] == [r["seconds"] for r in before]
    assert row["fragments_finished"] == row["fragments"] and row["miscounted"] == 0
    assert row["emulations"] == 2 and row["emulations_cut_short"] == 1


def test_an_impaired_sitting_opens_with_its_own_unimpaired_reference(tmp_path):
    """With --resume (rows spanning sittings, maybe machines) an impaired row's sitting first
    runs one unimpaired iteration on its own emulation: its slowdown is a ratio within one run."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "reliability",
            "--item",
            "loss",
            "--impairment",
            "duplicate:2",
            "--iterations",
            "1",
            "--gradient-mb",
            "0.25",
            "--timeout",
            "120",
            "--out",
            str(tmp_path),
            "--resume",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-800:]
    entries = [json.loads(line) for line in (tmp_path / "loss.jsonl").read_text().splitlines()]
    kinds = [
        next(k for k in ("journal", "started", "reference", "iteration", "ended") if k in e)
        for e in entries
    ]
    assert kinds == ["journal", "started", "reference", "iteration", "ended"]
    reference, iteration = entries[2]["reference"], entries[3]["iteration"]
    assert reference["exact"] and iteration["exact"]
    (row,) = json.loads((tmp_path / "loss.json").read_text())["runs"][0]["runs"].values()
    (sitting,) = row["sittings"]
    assert sitting["reference_iterations"] == 1
    assert sitting["slowdown"] == pytest.approx(iteration["seconds"] / reference["seconds"])
    assert row["iterations_completed"] == 1
