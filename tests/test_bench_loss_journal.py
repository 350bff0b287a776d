"""The loss item's journal (controller.tools.bench.loss_journal): what a row keeps across sittings,
read back after a kill, and a resume from other settings refused (no root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.emulation.mininet_runner import IterationResult
from controller.tools.bench.loss_journal import (
    Journal,
    JournalMismatch,
    code_revision,
    iteration_record,
    recovery_cost,
)

SETTINGS = {
    "item": "loss",
    "target": "embedded",
    "scheme": "aro",
    "gradient_mb": 4.0,
    "timeout_seconds": 600.0,
    "scale_mbps": None,
}


def _record(seconds: float, resent: int, exact: bool = True) -> dict:
    return {
        "seconds": seconds,
        "exact": exact,
        "retransmissions": resent,
        "resent_on_timeout": resent,
        "resent_on_control": 0,
        "resent_on_loss": 0,
        "rto_ms": 500.0,
        "fragments": 100,
        "fragments_finished": 100,
        "miscounted": 0,
        "duplicates_ignored_at_ps": 1,
    }


def _session(offered: int, hit: int, received: int, versions: int, error=None) -> dict:
    return {
        "measured": {
            "frames_offered": offered,
            "frames_hit": hit,
            "frames_received_by_far_ends": received,
        },
        "error": error,
        "plan_versions": versions,
        "switch_duplicates": 3,
    }


def test_a_row_measured_over_two_sittings_and_a_kill_reads_back_whole(tmp_path):
    path = tmp_path / "loss.jsonl"
    first = Journal(path, SETTINGS, resume=False)
    first.started("fig1", "loss 5 %")
    first.iteration("fig1", "loss 5 %", _record(10.0, 7))
    first.ended("fig1", "loss 5 %", _session(1000, 50, 950, 1))
    first.started("fig1", "loss 5 %")  # this sitting is killed after one iteration ...
    first.iteration("fig1", "loss 5 %", _record(20.0, 9))
    with path.open("a") as f:
        f.write('{"topology":"fig1","row":"loss 5 %","itera')  # ... mid-line

    second = Journal(path, SETTINGS, resume=True)
    row = second.row("fig1", "loss 5 %")
    assert [r["seconds"] for r in row.records] == [10.0, 20.0]
    second.started("fig1", "loss 5 %")
    second.iteration("fig1", "loss 5 %", _record(30.0, 2, exact=False))
    second.ended("fig1", "loss 5 %", _session(3000, 150, 2850, 2))

    report = Journal(path, SETTINGS, resume=True).row("fig1", "loss 5 %").report()
    assert report["iterations_completed"] == 3
    assert report["seconds"] == [10.0, 20.0, 30.0]
    assert report["mean_seconds"] == 20.0
    assert report["exact"] is False  # one wrong result makes the row wrong
    assert report["retransmissions"] == 18 and report["fragments_finished"] == 300
    assert report["measured"] == {
        "frames_offered": 4000,
        "frames_hit": 200,
        "frames_received_by_far_ends": 3800,
        "hit_percent": 5.0,
        "received_per_offered": 0.95,
    }
    assert report["plan_versions"] == 2 and report["switch_duplicates"] == 6
    assert report["emulations"] == 3 and report["emulations_cut_short"] == 1
    assert report["error"] is None


def test_a_hang_is_the_rows_error_and_a_row_never_measured_has_no_counts(tmp_path):
    journal = Journal(tmp_path / "loss.jsonl", SETTINGS, resume=False)
    journal.started("fig1", "loss 1 %")
    journal.ended("fig1", "loss 1 %", _session(10, 0, 10, 1, error="hang at fragment 7"))
    assert journal.row("fig1", "loss 1 %").error == "hang at fragment 7"
    report = journal.row("fig1", "loss 1 %").report()
    assert report["iterations_completed"] == 0 and report["retransmissions"] is None
    assert journal.labels("fig1") == ["loss 1 %"] and journal.labels("other") == []


def test_without_resume_the_journal_starts_afresh(tmp_path):
    path = tmp_path / "loss.jsonl"
    Journal(path, SETTINGS, resume=False).iteration("fig1", "none", _record(1.0, 0))
    assert Journal(path, SETTINGS, resume=False).row("fig1", "none").records == []
    assert len(path.read_text().splitlines()) == 1


@pytest.mark.parametrize("header", [{**SETTINGS, "gradient_mb": 0.25}, None])
def test_resuming_from_other_settings_is_refused(tmp_path, header):
    path = tmp_path / "loss.jsonl"
    path.write_text((json.dumps({"journal": header}) if header else "not json") + "\n")
    with pytest.raises(JournalMismatch, match="--gradient-mb"):
        Journal(path, SETTINGS, resume=True)


def test_the_command_refuses_such_a_resume_with_exit_2(tmp_path):
    (tmp_path / "loss.jsonl").write_text(
        json.dumps({"journal": {**SETTINGS, "gradient_mb": 0.25}}) + "\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "reliability",
            "--item",
            "loss",
            "--resume",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--resume" in proc.stderr and "Traceback" not in proc.stderr


def test_resume_belongs_to_the_loss_item_only():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "reliability",
            "--item",
            "congestion",
            "--resume",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "--item loss" in proc.stderr


def test_a_damaged_line_inside_the_journal_is_refused_not_skipped(tmp_path):
    """Only the last line can be cut short by a kill; a bad line before it means the file
    was edited or mixed, and skipping it would drop an iteration silently."""
    path = tmp_path / "loss.jsonl"
    journal = Journal(path, SETTINGS, resume=False)
    journal.iteration("fig1", "none", _record(1.0, 0))
    journal.iteration("fig1", "none", _record(2.0, 0))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"row": "none"}', lines[2]]) + "\n")
    with pytest.raises(JournalMismatch, match="line 2"):
        Journal(path, SETTINGS, resume=True)


def test_each_sitting_records_the_code_it_ran_and_the_row_lists_them_once(tmp_path):
    """A row measured over several sittings may span commits: the report names each."""
    head = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = tmp_path / "loss.jsonl"
    with path.open("w") as f:  # a journal written before revisions were recorded
        f.write(json.dumps({"journal": SETTINGS}) + "\n")
        f.write(json.dumps({"topology": "fig1", "row": "none", "started": True}) + "\n")
    journal = Journal(path, SETTINGS, resume=True)
    journal.started("fig1", "none")
    journal.started("fig1", "none")
    revisions = Journal(path, SETTINGS, resume=True).row("fig1", "none").report()["code_revisions"]
    assert revisions[0] == "not recorded" and len(revisions) == 2
    assert revisions[1].removesuffix("+changes") == head


def test_code_inside_another_repository_names_no_commit(tmp_path):
    """An installed copy in a virtualenv inside some other checkout is not that checkout's code."""

    def git(*argv):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    git("init", "-q")
    (tmp_path / "README").write_text("another project\n")
    git("add", "README")
    git("commit", "-qm", "another project")
    installed = tmp_path / "venv" / "site-packages"
    installed.mkdir(parents=True)
    assert code_revision(installed) == "not a git checkout"
    assert code_revision(tmp_path) == git("rev-parse", "--short=12", "HEAD").strip()


def test_a_row_measured_over_sittings_gives_each_sittings_own_figures(tmp_path):
    """Sittings on a shared machine may differ (load, the machine itself): the row's mean
    blends them, so each sitting's mean and resends are reported beside it."""
    path = tmp_path / "loss.jsonl"
    journal = Journal(path, SETTINGS, resume=False)
    journal.started("fig1", "loss 1 %")
    journal.iteration("fig1", "loss 1 %", _record(100.0, 10))
    journal.iteration("fig1", "loss 1 %", _record(110.0, 30))
    journal.started("fig1", "loss 1 %")  # a sitting cut short before its first iteration
    journal.started("fig1", "loss 1 %")
    journal.iteration("fig1", "loss 1 %", _record(190.0, 90))
    report = Journal(path, SETTINGS, resume=True).row("fig1", "loss 1 %").report()
    assert report["mean_seconds"] == pytest.approx(400.0 / 3)
    assert [
        (s["iterations"], s["mean_seconds"], s["retransmissions"]) for s in report["sittings"]
    ] == [(2, 105.0, 40), (1, 190.0, 90)]


def test_each_sitting_is_compared_with_its_own_reference_iterations(tmp_path):
    """Two sittings on machines of different speed: the row's slowdown against its own
    references is the mean of each iteration over its sitting's reference mean."""
    path = tmp_path / "loss.jsonl"
    journal = Journal(path, SETTINGS, resume=False)
    journal.started("fig1", "loss 1 %")  # no reference: written before references existed
    journal.iteration("fig1", "loss 1 %", _record(300.0, 5))
    journal.started("fig1", "loss 1 %")
    journal.reference("fig1", "loss 1 %", _record(100.0, 0))
    journal.reference("fig1", "loss 1 %", _record(140.0, 0))
    journal.iteration("fig1", "loss 1 %", _record(240.0, 5))
    journal.iteration("fig1", "loss 1 %", _record(360.0, 5))
    journal.started("fig1", "loss 1 %")
    journal.reference("fig1", "loss 1 %", _record(50.0, 0))
    journal.iteration("fig1", "loss 1 %", _record(100.0, 5))
    report = Journal(path, SETTINGS, resume=True).row("fig1", "loss 1 %").report()
    assert [(s["reference_mean_seconds"], s["slowdown"]) for s in report["sittings"]] == [
        (None, None),
        (120.0, 2.5),
        (50.0, 2.0),
    ]
    assert report["slowdown_against_own_references"] == pytest.approx((2 + 3 + 2) / 3)
    assert report["iterations_completed"] == 4  # references are not the row's iterations
    assert report["mean_seconds"] == pytest.approx(250.0)


def test_reference_iterations_belong_to_the_loss_item_and_are_not_negative():
    for argv, says in (
        (["--item", "congestion", "--reference-iterations", "1"], "--item loss"),
        (["--item", "loss", "--reference-iterations", "-1"], "0 or more"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "controller.cli", "bench", "reliability", *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def test_the_delay_lines_counts_are_summed_over_a_rows_emulations(tmp_path):
    path = tmp_path / "loss.jsonl"
    journal = Journal(path, SETTINGS, resume=False)
    journal.ended("fig1", "reorder 10 %", _session(10, 1, 10, 1))  # before they were recorded
    assert journal.row("fig1", "reorder 10 %").report()["delay_lines"] == {}
    for held, refused in ((100, 2), (50, 0)):
        journal.ended(
            "fig1",
            "reorder 10 %",
            {
                **_session(10, 1, 10, 1),
                "delay_lines": {
                    "held": held,
                    "sent": held - refused - 1,
                    "refused_by_link": refused,
                    "held_at_stop": 1,
                    "dropped_before_read": 3,
                },
            },
        )
    lines = Journal(path, SETTINGS, resume=True).row("fig1", "reorder 10 %").report()["delay_lines"]
    assert lines == {
        "held": 150,
        "sent": 146,
        "refused_by_link": 2,
        "held_at_stop": 2,
        "dropped_before_read": 6,
    }


def test_recovery_cost_sets_resends_against_the_frames_the_loss_rules_dropped(tmp_path):
    """Resends per frame dropped (the nft loss rules' own counters, by kind, summed over a
    row's emulations) and resends as a share of the fragments the workers sent."""
    journal = Journal(tmp_path / "loss.jsonl", SETTINGS, resume=False)
    for resent, lost in ((7, {"contributions": 3, "results": 2, "acks_probes": 0}), (9, None)):
        journal.started("fig1", "loss 1 %")
        journal.iteration("fig1", "loss 1 %", {**_record(10.0, resent), "workers": 5})
        session = _session(1000, 5, 995, 1)
        if lost:
            session["measured"]["frames_lost"] = lost
        else:  # the second emulation dropped as much again
            session["measured"]["frames_lost"] = {
                "contributions": 1,
                "results": 4,
                "acks_probes": 0,
            }
        journal.ended("fig1", "loss 1 %", session)
    cost = recovery_cost(journal.row("fig1", "loss 1 %").report())
    assert cost["frames_lost"] == 10
    assert cost["frames_lost_by_kind"] == {"contributions": 4, "results": 6, "acks_probes": 0}
    assert cost["resends"] == 16 and cost["resends_per_lost_frame"] == 1.6
    assert cost["resends_by_cause"] == {"loss": 0, "timeout": 16, "control": 0}
    assert cost["resent_percent"] == 1.6  # 16 of 2 x 100 fragments x 5 workers
    journal.started("fig1", "none")
    journal.iteration("fig1", "none", _record(10.0, 3))  # recorded before `workers` was kept
    journal.ended("fig1", "none", _session(1000, 0, 1000, 1))
    unimpaired = recovery_cost(journal.row("fig1", "none").report())
    assert unimpaired["resends_per_lost_frame"] is None and unimpaired["resent_percent"] is None


def test_an_iteration_record_keeps_how_the_workers_found_their_losses():
    """Slow and fast iterations of one row did the same recovery work but not the same
    timeouts: each record keeps the workers' timeouts, detections, PROBEs, named NACKs and
    the largest smoothed round trip, summed from their reports."""
    reports = {
        name: {
            "resent_on_timeout": 1,
            "resent_on_control": 0,
            "timed_out": timed_out,
            "detected_lost": 10,
            "probes": 3,
            "named": 2,
            "srtt_ms": srtt,
        }
        for name, timed_out, srtt in (("h1", 4, 20.5), ("h2", 7, 31.0))
    }
    it = IterationResult(1, 2.0, 2.5, True, {}, 0, 0.0, 0.0, worker_reports=reports)
    record = iteration_record(it)
    assert (record["timed_out"], record["detected_lost"], record["probes"]) == (11, 20, 6)
    assert (record["named"], record["srtt_ms"]) == (4, 31.0)
