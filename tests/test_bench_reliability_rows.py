"""`ina bench reliability`: which loss rows run, each item's default size, bad input (no root)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from controller.emulation.faults.impair import Impairment
from controller.tools.bench.reliability import IMPAIRMENTS, _rows, add_parser, with_item_defaults


def test_without_the_option_every_row_runs_the_unimpaired_one_first():
    assert _rows(None) == (None, *IMPAIRMENTS)
    assert [row.label() for row in _rows(None)[1:]] == [
        "loss 1 %",
        "loss 5 %",
        "duplicate 2 %",
        "reorder 10 %",
    ]


def test_the_rows_asked_run_in_the_order_asked():
    assert _rows(["loss:5", "none"]) == (Impairment("loss", 5.0), None)


@pytest.mark.parametrize(
    "bad, says",
    [
        (["loss"], "KIND:PERCENT"),
        (["jitter:3"], "kind"),
        (["loss:150"], "percent"),
        (["loss:x"], "float"),
        (["none", "none"], "twice"),
    ],
)
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "reliability",
            "--item",
            "longrun",
            "--impairment",
            "loss:1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "--item loss" in proc.stderr


@pytest.mark.parametrize(
    "item, iterations, gradient_mb, timeout",
    [
        ("loss", 20, 4.0, 600.0),  # RELIABILITY.md's 20 x 4 MB
        ("congestion", 3, 0.1, 120.0),  # at 30 % of the pace 4 MB would take minutes an iteration
        ("longrun", 200, 0.05, 120.0),  # RELIABILITY.md's 200 iterations
    ],
)
def test_each_item_has_the_size_its_figures_were_measured_with(
    item, iterations, gradient_mb, timeout
):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = with_item_defaults(parser.parse_args(["reliability", "--item", item]))
    assert (args.iterations, args.gradient_mb, args.timeout) == (iterations, gradient_mb, timeout)
    given = with_item_defaults(
        parser.parse_args(
            ["reliability", "--item", item, "--gradient-mb", "2", "--iterations", "7"]
        )
    )
    assert (given.iterations, given.gradient_mb) == (7, 2.0)


@pytest.mark.parametrize(
    "option, value",
    [("--iterations", "0"), ("--gradient-mb", "-1"), ("--timeout", "0"), ("--seconds", "0")],
)
def test_a_count_or_size_of_zero_or_less_is_refused_with_exit_2(option, value):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "bench",
            "reliability",
            "--item",
            "loss",
            option,
            value,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and option in proc.stderr and "Traceback" not in proc.stderr
