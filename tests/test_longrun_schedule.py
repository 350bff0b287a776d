"""The long run's fault schedule (RELIABILITY.md section 6), and its bad input, without root."""

from __future__ import annotations

import subprocess
import sys

import pytest

from controller.emulation.faults.longrun import schedule


def test_the_issue_size_has_a_restart_and_a_cut_in_every_50_iterations():
    faults = schedule(200, 50)
    assert sorted(k for k, f in faults.items() if f == "restart") == [25, 75, 125, 175]
    assert sorted(k for k, f in faults.items() if f == "cut") == [50, 100, 150, 200]
    for window in range(4):  # each block of 50 holds exactly one of each
        block = [faults.get(k) for k in range(50 * window + 1, 50 * window + 51)]
        assert block.count("restart") == 1 and block.count("cut") == 1


@pytest.mark.parametrize("every", [0, 1])
def test_every_below_2_is_refused(every):
    with pytest.raises(ValueError):
        schedule(10, every)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "reliability",
            "--item",
            "longrun",
            "--every",
            str(every),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "--every" in proc.stderr and "Traceback" not in proc.stderr
