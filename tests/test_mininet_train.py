"""`ina train` on Mininet (root): 4 workers train 2 epochs of the digits MLP with their
gradients summed by the switches. Independent references: the float64 single-process run
(final accuracy within half a point) and, per step, the int64 sum of the int32 values every
worker sent (each worker's result must equal it bit for bit)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import EXAMPLES

from controller.cli import main
from dataplane.p4build import compiler_path

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root (CI runs as root)"),
]
BMV2 = pytest.mark.skipif(
    shutil.which("simple_switch_grpc") is None or compiler_path() is None,
    reason="needs bmv2 simple_switch_grpc and p4c",
)


@pytest.mark.parametrize("target", ["embedded", pytest.param("bmv2", marks=BMV2)])
def test_train_on_fig1_matches_the_reference_and_every_sum_is_exact(target, tmp_path):
    out = tmp_path / "train.json"
    code = main(
        [
            "train",
            str(EXAMPLES / "aro-fig1.yaml"),
            "--scheme",
            "aro",
            "--workers",
            "4",
            "--epochs",
            "2",
            "--target",
            target,
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    reference = report["reference"][-1]["accuracy"]
    assert run["steps"] == 2 * (1437 // 64) == len(run["step_seconds"])
    assert run["exact_steps"] == run["steps"]
    assert run["same_params"]
    assert abs(run["epochs"][-1]["accuracy"] - reference) <= 0.005
    assert run["ps_bytes_per_step"] > 0
    assert code == 0
