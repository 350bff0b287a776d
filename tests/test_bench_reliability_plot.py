"""`ina bench reliability --item loss`'s figure shows both slowdowns of a row measured in
sittings with their own references (a none row from another machine can read very
differently: docs/reliability/journal.md, "Sittings differ"). Drawn from a journal we measured."""

from __future__ import annotations

import json
import math

import matplotlib.figure
import pytest
from conftest import ROOT

from controller.tools.bench.reliability import _plot

REPORT = ROOT / "docs/benchmarks/reliability/leaf-spine/4mb-20/loss.json"


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """Plots a report and returns its slowdown axis: the figure as saved, lines by label."""
    saved = []
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda fig, *args, **kwargs: saved.append(fig)
    )

    def draw(report: dict) -> dict[str, list[float]]:
        _plot(report, tmp_path / "loss.png")
        return {line.get_label(): list(line.get_ydata()) for line in saved[-1].axes[0].lines}

    return draw


def test_a_row_with_its_own_references_shows_that_slowdown_beside_the_none_rows(drawn):
    report = json.loads(REPORT.read_text())
    rows = report["runs"][0]["runs"]
    lines = drawn(report)
    own = lines["leaf-spine-4x4-16w, against each sitting's own reference"]
    for (row, values), point in zip(rows.items(), own, strict=True):
        expected = values.get("slowdown_against_own_references")
        if expected is None:
            assert math.isnan(point), row
        else:
            assert point == pytest.approx(expected), row
    assert not math.isnan(own[list(rows).index("loss 5 %")])
    assert lines["leaf-spine-4x4-16w"] == [values["slowdown"] for values in rows.values()]


def test_rows_without_own_references_draw_only_the_none_row_ratio(drawn):
    report = json.loads(REPORT.read_text())
    for values in report["runs"][0]["runs"].values():
        values["slowdown_against_own_references"] = None
    assert list(drawn(report)) == ["leaf-spine-4x4-16w"]
