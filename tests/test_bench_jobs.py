"""`ina bench jobs` at a small size on real embedded switch processes: its JSON's claims
hold (every cycle admitted and ended, zero leaks read back by our own P4Runtime client, the
job's entries there while it ran, each trace job at one rate for its whole life), and bad
flags are one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "bench", "jobs", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_few_cycles_and_a_short_trace_leave_nothing_behind(tmp_path):
    run = _bench("--cycles", "5", "--check-every", "2", "--jobs", "6", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "cycles 5/5" in run.stderr and "trace " in run.stderr  # progress lines
    report = json.loads((tmp_path / "jobs.json").read_text())
    cycles = report["cycles"]
    assert cycles["cycles"] == 5 and cycles["failures"] == []
    assert [r["cycle"] for r in cycles["rows"] if "leaked_entities" in r] == [2, 4, 5]
    assert cycles["leaks"] == {"entities": 0, "slot_regions": 0, "left_reported": 0}
    assert cycles["entities_missing_while_running"] == 0
    for row in cycles["rows"]:
        if "entities_added" in row:  # its table entries read back, and its multicast groups
            assert row["entities_added"] > row["entries_answered"] > 0
    assert cycles["rss_mb"]["start"] > 10 and len(cycles["rss_mb"]["samples"]) == 4
    assert 0 < cycles["post_seconds"]["median"] <= cycles["post_seconds"]["p99"]
    trace = report["trace"]
    assert trace["admitted"] + sum(trace["refused"].values()) == 6
    assert trace["samples"][0]["t"] == 0 and "job0" in trace["samples"][0]["rates"]
    for name, outcome in trace["outcomes"].items():
        seen = {s["rates"][name] for s in trace["samples"] if name in s["rates"]}
        if outcome["admitted"]:  # a running job is never moved
            assert sorted(seen) == pytest.approx([outcome["rate_gbps"]]), name
        else:
            assert not seen, name
    assert trace["samples"][-1]["rates"].keys() == {"job0"}  # every trace job ended
    assert (tmp_path / "jobs-cycles.png").stat().st_size > 10_000
    assert (tmp_path / "jobs-trace.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cycles", "-1"], "--cycles: must be at least 0"),
        (["--jobs", "many"], "--jobs: expected a whole number"),
        (["--check-every", "0"], "--check-every: must be at least 1"),
        (["--colour", "red"], "unrecognized arguments: --colour red"),
        (["--scheme", "nope"], "--scheme: invalid choice: 'nope'"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args, says):
    run = _bench(*args)
    assert run.returncode == 2 and says in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
