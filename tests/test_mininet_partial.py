"""Partial aggregation end to end on Mininet (root): ATP's per-fragment best effort on GRID's
Fig. 1 (`ina mininet ... --scheme atp --param partial=true`), results exact and the PS getting
the flows per fragment that the shares give."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import EXAMPLES, MININET, ROOT

from dataplane.frame import K

pytestmark = MININET

GRADIENT_MB = 0.1


def test_atp_partial_on_grid_fig1_runs_exact_with_its_fragments_split(tmp_path):
    out = tmp_path / "run.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "mininet",
            str(EXAMPLES / "grid-fig1.yaml"),
            "--scheme",
            "atp",
            "--param",
            "partial=true",
            "--gradient-mb",
            str(GRADIENT_MB),
            "--iterations",
            "2",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        check=True,
        timeout=800,
    )
    (run,) = json.loads(out.read_text())
    assert run["exact"] and len(run["iterations"]) == 2
    assert run["plan_rate_gbps"] == pytest.approx(39 / 16, rel=1e-6)
    rows = -(-int(GRADIENT_MB * 2**20) // 4 // K)
    # S1 and S3 merge the first 12/13 of the fragments (tests/test_partial.py): one flow into
    # the PS; beyond, W1-W4 cross raw, S2's sum of W5 and W6, W7 and W8 raw: 7 flows.
    cut = round(12 / 13 * rows)
    expected = (cut + 7 * (rows - cut)) / rows
    for it in run["iterations"]:
        assert it["ps_flows"] == pytest.approx(expected, abs=0.002), it["ps_report"]
