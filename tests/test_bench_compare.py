"""`ina bench compare`: figures reproduce the stated example values, executors agree, and
BENCHMARKS.md keeps other sections intact."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from distributed import LocalCluster

from controller.model.inputs import InputError
from controller.tools.bench.compare import (
    DOCS,
    FIGURES,
    SECTION,
    TABLES,
    Figure,
    compare,
    scheme_params,
    summarise,
    update_benchmarks,
)


def _outcome(result: dict) -> list[tuple]:
    """What must not depend on the executor: every run's identity and score (not its time)."""
    return [
        (
            r["index"],
            r["setting"],
            r["seed"],
            r["scheme"],
            r.get("rate_gbps"),
            r.get("consistent"),
            r.get("error"),
        )
        for r in result["runs"]
    ]


def test_grid_fig1_figure(tmp_path):
    """GRID Fig. 1 through the harness: JSON, PNG, BENCHMARKS.md row, the paper's values."""
    bench = tmp_path / "BENCHMARKS.md"
    result = compare("grid-fig1", jobs=1, out=tmp_path / "out", benchmarks=bench, progress=False)
    mean = {r["scheme"]: r["mean_gbps"] for r in result["summary"]}
    assert mean["grid"] == pytest.approx(3.0)
    assert mean["geryon"] == pytest.approx(1.0)
    assert mean["atp"] == pytest.approx(2.25)  # 2.43 needs per-fragment overflow (atp.py)
    assert all(r["consistent"] for r in result["runs"])
    assert (tmp_path / "out" / "results.json").exists()
    assert (tmp_path / "out" / "grid-fig1.png").stat().st_size > 0
    text = bench.read_text()
    assert SECTION in text and "grid 3 / 3" in text
    assert json.loads((tmp_path / DOCS / "grid-fig1.json").read_text()) == json.loads(
        (tmp_path / "out" / "results.json").read_text()
    )


def test_same_results_on_a_dask_cluster(tmp_path):
    """Seeded runs give identical results in local processes and on 2 Dask workers."""
    local = compare(
        "smoke", seeds=2, jobs=2, out=tmp_path / "local", benchmarks=None, progress=False
    )
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        remote = compare(
            "smoke",
            seeds=2,
            cluster=cluster.scheduler_address,
            out=tmp_path / "dask",
            benchmarks=None,
            progress=False,
        )
    assert _outcome(local) == _outcome(remote)
    assert not any("error" in r for r in local["runs"])
    assert remote["executor"].startswith("dask")


def test_benchmarks_rows_replace_only_their_own(tmp_path):
    bench = tmp_path / "BENCHMARKS.md"
    bench.write_text("# Benchmarks\n\n## ARO\n\nkept as it is\n")
    update_benchmarks(bench, "fig", ["| a |"])
    update_benchmarks(bench, "other", ["| b |"])
    update_benchmarks(bench, "fig", ["| c |"])
    text = bench.read_text()
    assert text.startswith("# Benchmarks\n\n## ARO\n\nkept as it is\n")
    assert "| a |" not in text and text.index("| c |") < text.index("| b |")
    assert text.count(SECTION) == 1


def test_the_committed_tables_are_where_a_rerun_writes_them():
    """The default page holds every figure's generated rows, and the PNG each row links
    (DOCS, relative to that page) is the committed copy beside it."""
    text = TABLES.read_text()
    assert SECTION in text
    for name in ("grid-fig1", "aro-fig7a", "grid-fig11", "grid-fig12"):
        assert f"<!-- compare:{name} -->" in text and f"]({DOCS.as_posix()}/{name}.png)" in text
        assert (TABLES.parent / DOCS / f"{name}.png").exists()


TINY = {"leaves": 4, "spines": 2, "hosts_per_leaf": 6}
NEW_ARO = ("aro-fig7b", "aro-fig7c", "aro-fig8b", "aro-fig9", "aro-fig10")


def _tiny(figure: Figure) -> Figure:
    """The figure's own settings on a 4-leaf fabric, workers scaled down to fit."""
    settings = []
    for s in figure.settings[:2] + figure.settings[-1:]:
        kwargs = {**s.kwargs, **TINY}
        kwargs["workers"] = max(1, kwargs.get("workers", 200) // 100 * 2)
        settings.append(replace(s, kwargs=kwargs))
    return replace(figure, settings=tuple(settings))


@pytest.mark.parametrize("name", NEW_ARO)
def test_aro_figures_smoke(name, tmp_path, monkeypatch):
    """Each new ARO figure runs end to end on tiny fabrics: rows per metric, PNG copied."""
    monkeypatch.setitem(FIGURES, name, _tiny(FIGURES[name]))
    bench = tmp_path / "BENCHMARKS.md"
    result = compare(
        name,
        seeds=1,
        schemes=("random", "aggtree", "aro"),
        jobs=1,
        out=tmp_path / "out",
        benchmarks=bench,
        time_limit=10,
        progress=False,
    )
    assert not any("error" in r for r in result["runs"])
    assert all(r["consistent"] for r in result["runs"])
    figure = FIGURES[name]
    assert len(result["summary"]) == 3 * 3 * len(figure.metrics)
    assert (tmp_path / DOCS / f"{name}.png").stat().st_size > 0
    assert f"]({DOCS.as_posix()}/{name}.png)" in bench.read_text()
    if "total" in figure.metrics:
        assert all(r["total_gbps"] >= r["rate_gbps"] - 1e-9 for r in result["runs"])


def test_aro_figure_settings():
    """The paper's sweeps and the values it states, where it states them."""
    assert [s.kwargs["ina"] for s in FIGURES["aro-fig7b"].settings] == [
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
        0.6,
        0.7,
    ]
    assert [s.kwargs["workers"] for s in FIGURES["aro-fig7c"].settings] == [100, 200, 300, 400]
    assert FIGURES["aro-fig7c"].settings[1].paper["aro"] == 26.33
    fig9 = FIGURES["aro-fig9"]
    assert [(s.kwargs["jobs"], s.kwargs["tasks"]) for s in fig9.settings] == [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
    ]
    assert fig9.settings[-1].paper_total == {"aro": 100.0, "aro-acc": 100.0}
    assert [s.label for s in FIGURES["aro-fig10"].settings] == ["1J2T", "2J2T", "3J2T", "4J2T"]


def test_ratio_against_a_stated_range():
    """A ratio the paper states as a range is flagged only when ours is 25 % outside it."""
    figure = FIGURES["aro-fig9"]
    setting = figure.settings[0]
    records = [
        {"setting": setting.label, "scheme": s, "rate_gbps": r, "total_gbps": r}
        for s, r in (("aro", 30.0), ("aggtree", 10.0), ("random", 10.0))
    ]
    ratios = summarise(figure, records, ("aro", "aggtree", "random"))["ratios"]
    got = {(q["ratio"], q["metric"]): q for q in ratios if q["setting"] == setting.label}
    assert got[("aro/aggtree", "min")]["deviation"] == pytest.approx(3.0 / 2.5 - 1)
    assert not got[("aro/aggtree", "min")]["flagged"]  # 3.0 vs 1.8-2.5: 20 % above
    assert got[("aro/random", "total")]["deviation"] == 0.0  # within 2.8-4.1


def test_scheme_params_override_the_figure(tmp_path):
    """`--param atp:ps_side=false` reaches the solver: one-level ATP leaves S1, S2 and S3's
    results separate at GRID Fig. 1's PS (3 flows), ATP's default merges them at S3 (1)."""
    assert scheme_params(["atp:ps_side=false", "atp:levels=all", "grid:k=2"]) == {
        "atp": {"ps_side": False, "levels": "all"},
        "grid": {"k": 2},
    }
    with pytest.raises(ValueError):
        scheme_params(["levels=all"])
    flows = {}
    for side in (True, False):
        result = compare(
            "grid-fig1",
            schemes=("atp",),
            jobs=1,
            out=tmp_path / str(side),
            benchmarks=None,
            progress=False,
            params={"atp": {"ps_side": side}},
        )
        assert result["params"]["atp"] == {"ps_side": side}
        flows[side] = result["runs"][0]["ps_flows"]
    assert flows == {True: [1], False: [3]}


def test_a_stopped_sweep_resumes_from_its_journal(tmp_path):
    """Runs journaled by a sweep are reused, not recomputed, by `resume` (a record altered in
    the journal shows up in the result), new seeds are computed, and a journal of other
    parameters is refused."""
    out = tmp_path / "out"
    first = compare("smoke", seeds=1, jobs=1, out=out, benchmarks=None, progress=False)
    journal = out / "records.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == 1 + len(first["runs"])  # header, then one line per run
    marked = [json.loads(line) for line in lines[1:]]
    for record in marked:
        record["rate_gbps"] = -1.0  # no solver gives this: seen again only if reused
    journal.write_text("\n".join([lines[0], *map(json.dumps, marked)]) + "\n")
    again = compare("smoke", seeds=2, jobs=1, out=out, benchmarks=None, progress=False, resume=True)
    reused = {r["seed"] for r in again["runs"] if r["rate_gbps"] == -1.0}
    assert reused == {0}
    assert len(again["runs"]) == 2 * len(first["runs"])
    assert all(r["rate_gbps"] > 0 for r in again["runs"] if r["seed"] == 1)
    with pytest.raises(InputError):
        compare(
            "smoke",
            seeds=1,
            jobs=1,
            out=out,
            benchmarks=None,
            progress=False,
            resume=True,
            params={"grid": {"links": False}},
        )
    fresh = compare("smoke", seeds=1, jobs=1, out=out, benchmarks=None, progress=False)
    assert all(r["rate_gbps"] > 0 for r in fresh["runs"])  # without resume: computed afresh
