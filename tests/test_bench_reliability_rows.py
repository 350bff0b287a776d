"""`ina bench reliability --item loss --impairment`: which rows run, and bad input (no root)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from controller.bench.reliability import IMPAIRMENTS, _rows
from controller.faults.impair import Impairment


def test_without_the_option_every_row_runs_the_unimpaired_one_first():
    assert _rows(None) == (None, *IMPAIRMENTS)
    assert [row.label() for row in _rows(None)[1:]] == [
        "loss 1 %", "loss 5 %", "duplicate 2 %", "reorder 10 %"]


def test_the_rows_asked_run_in_the_order_asked():
    assert _rows(["loss:5", "none"]) == (Impairment("loss", 5.0), None)


@pytest.mark.parametrize("bad, says", [
    (["loss"], "KIND:PERCENT"),
    (["jitter:3"], "kind"),
    (["loss:150"], "percent"),
    (["loss:x"], "float"),
    (["none", "none"], "twice"),
])
def test_a_row_we_cannot_run_is_refused_with_exit_2(bad, says):
    with pytest.raises(ValueError, match=says):
        _rows(bad)
    argv = [sys.executable, "-m", "controller.cli", "bench", "reliability", "--item", "loss"]
    for row in bad:
        argv += ["--impairment", row]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "--impairment" in proc.stderr and "Traceback" not in proc.stderr


def test_the_option_belongs_to_the_loss_item_only():
    proc = subprocess.run([sys.executable, "-m", "controller.cli", "bench", "reliability",
                           "--item", "longrun", "--impairment", "loss:1"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "--item loss" in proc.stderr
