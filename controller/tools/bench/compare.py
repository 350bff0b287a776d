"""`ina bench compare --figure NAME`: the papers' scheme comparisons, rerun and scored by our
evaluator.

A figure is a set of settings (topology generator and its parameters, or an example file), a
list of schemes and the values the paper states. Each run (setting × seed × scheme) builds its
topology from the seed, solves and evaluates it, so a run is a pure function of its
description: results are the same whichever process or machine computes them, and are stored
in run order. Rates are the evaluator's (max-min fair, pipeline-aware), never the schemes' own.

Executors: a local `concurrent.futures` process pool by default; `--cluster ADDRESS` sends the
runs to an existing Dask distributed scheduler. Dask rather than Ray because it is pure Python
and pip-installable without a native runtime, its `Client.map` takes the same picklable
function and arguments as the process pool (no actor or object-store model to learn), and
`distributed.LocalCluster` gives CI a real scheduler and workers in-process. Dask workers must
be able to import this package (same environment as the client).

Output per figure: `out/bench/compare/<figure>/results.json` (every run, per-setting means and
the ratios between schemes next to the paper's) and `<figure>.png`, drawn like the paper's plot;
plus the figure's rows in the "Scheme comparison" section of docs/benchmarks/compare.md (which
BENCHMARKS.md summarises), linking a copy of the PNG under `docs/benchmarks/compare/`, beside a
copy of the JSON (`<figure>.json`), so the numbers quoted stay checkable (out/ is not
committed). Runs go seed by seed over all settings and each record is appended to
`<out>/records.jsonl` as it arrives, so a sweep stopped early (`--resume` continues it;
`--resume --seeds K` summarises its first K seeds) loses nothing and covers every setting with
the same seeds.

Metrics: "min" is the slowest task's rate (ARO's bottleneck sending rate, GRID's rate); figures
with several tasks (ARO Figs. 9, 10) also report "total", the sum over tasks.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from controller.model.inputs import InputError
from controller.model.network import Network, build_network, load_topology
from controller.tools.tables import print_table

ROOT = Path(__file__).resolve().parents[3]
SECTION = "## Scheme comparison"
DOCS = Path("compare")  # committed PNG copies, relative to the page of tables (TABLES)
TABLES = ROOT / "docs" / "benchmarks" / "compare.md"
DEVIATION = 0.25  # ratios between schemes further than this from the paper's get flagged

console = Console()


@dataclass(frozen=True)
class Setting:
    """One point of a figure: a topology recipe and what the paper reports there."""

    label: str
    builder: str  # key of BUILDERS
    kwargs: dict[str, Any] = field(default_factory=dict)
    panel: str = ""  # subplot of the paper's figure
    x: float | None = None  # x-axis value for line and grouped-bar plots
    paper: dict[str, float] = field(default_factory=dict)  # metric "min"
    paper_total: dict[str, float] = field(default_factory=dict)  # metric "total"


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    source: str  # where the paper states its values
    schemes: tuple[str, ...]
    settings: tuple[Setting, ...]
    plot: str  # "bars", "violins", "lines" or "groups" (bars per setting)
    reference: str  # scheme the ratios are taken against
    seeds: int = 30
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: str = ""
    xlabel: str = "number of workers"
    metrics: tuple[str, ...] = ("min",)
    # reference/scheme ratios the paper's text states as a range for the whole figure
    paper_ratios: dict[str, tuple[float, float]] = field(default_factory=dict)
    timed: tuple[str, ...] = ()  # schemes whose mean solve time the table shows


@dataclass(frozen=True)
class Run:
    """Everything one solve needs; picklable, so any executor can compute it."""

    index: int
    figure: str
    setting: Setting
    seed: int
    scheme: str
    params: dict[str, Any]
    time_limit: float | None


# ------------------------------------------------------------------ topologies


def _example(seed: int, file: str) -> Network:
    return load_topology(ROOT / "topologies" / "examples" / file)


def _aro_leaf_spine(
    seed: int,
    workers: int = 200,
    leaves: int = 24,
    spines: int = 24,
    hosts_per_leaf: int = 24,
    ina: float = 0.2,
    pipelines: int = 4,
    jobs: int = 1,
    tasks: int = 1,
) -> Network:
    """ARO Sec. V-A: leaf-spine, 100 Gbps, γ of the switches INA (PS's leaf always), P pipelines;
    `jobs` with disjoint `workers` each, `tasks` per job sharing them, task i's PS under leaf i."""
    from controller.tools.bench.aro import aro_leaf_spine

    doc = aro_leaf_spine(
        seed,
        leaves=leaves,
        spines=spines,
        hosts_per_leaf=hosts_per_leaf,
        ina=ina,
        pipelines=pipelines,
        jobs=jobs,
        tasks=tasks,
        workers=workers,
    )
    return build_network(doc, source=f"aro leaf-spine seed {seed}")


def _grid_fabric(seed: int, kind: str, scenario: str, workers: int, share: float = 0.2) -> Network:
    """GRID Sec. 6.3: 100 Gbps everywhere (PS ingress too), INA capacity drawn in 0.1-3.2 Tbps.

    Scenario "a": every ToR INA; "b": a `share` of the switches (GRID: 20 %) drawn at random.
    GRID's model has no pipelines and does not make the PS's switch INA, so neither do these.
    """
    from controller.model.topogen import InaOptions, Workload, fat_tree, leaf_spine

    make: Callable[..., dict]
    if kind == "fat-tree":  # k = 8: 32 edge, 32 aggregation, 16 core; 6 servers per edge
        tors = [f"E{p}_{e}" for p in range(8) for e in range(4)]
        make = partial(fat_tree, k=8, hosts_per_edge=6)
    else:  # 30 leaves x 30 spines, 17 servers per leaf (510, GRID: 500)
        tors = [f"L{i}" for i in range(30)]
        make = partial(leaf_spine, leaves=30, spines=30, hosts_per_leaf=17)
    ina: float | list[str] = tors if scenario == "a" else share
    doc = make(
        ina=InaOptions(ina=ina, pipelines=1, ps_switch_ina=False),
        workload=Workload(workers_per_job=workers),
        seed=seed,
    )
    rng = random.Random(seed)
    for sw in doc["switches"]:
        if sw.get("ina"):
            sw["aggregation_capacity_gbps"] = round(rng.uniform(100.0, 3200.0), 3)
    _fill_racks(doc, rng)
    return build_network(doc, source=f"grid {kind} ({scenario}) seed {seed}")


def _fill_racks(doc: dict[str, Any], rng: random.Random) -> None:
    """GRID: "the number of workers per rack is determined", so workers fill whole racks (drawn
    in random order) instead of being scattered one by one over the servers."""
    task = doc["jobs"][0]["tasks"][0]
    hosts = {h["name"] for h in doc["hosts"]} - {task["ps"]}
    racks: dict[str, list[str]] = {}
    for link in doc["links"]:
        if link["a"] in hosts:
            racks.setdefault(link["b"], []).append(link["a"])
    order = sorted(racks)
    rng.shuffle(order)
    chosen = [h for rack in order for h in racks[rack]][: len(task["workers"])]
    role = dict.fromkeys(chosen, "worker")
    for host in doc["hosts"]:
        if host["role"] != "ps":
            host["role"] = role.get(host["name"], "idle")
    task["workers"] = sorted(chosen)


BUILDERS: dict[str, Callable[..., Network]] = {
    "example": _example,
    "aro-leaf-spine": _aro_leaf_spine,
    "grid-fabric": _grid_fabric,
}


# ------------------------------------------------------------------ figures


def _grid_settings(scenario: str, paper: dict[tuple[str, int], dict[str, float]]) -> tuple:
    return tuple(
        Setting(
            f"{kind}, {n} workers",
            "grid-fabric",
            {"kind": kind, "scenario": scenario, "workers": n},
            panel=kind,
            x=n,
            paper=paper.get((kind, n), {}),
        )
        for kind in ("fat-tree", "leaf-spine")
        for n in (20, 40, 60, 80, 100)
    )


def _grid_figure(
    number: int, scenario: str, what: str, paper: dict[str, float], notes: str = ""
) -> Figure:
    """GRID Figs. 11 and 12 differ only in the INA scenario and the value stated at one point."""
    point = ("fat-tree", 40) if scenario == "a" else ("fat-tree", 100)
    return Figure(
        f"grid-fig{number}",
        f"GRID Fig. {number}: sending rate vs workers, scenario ({scenario}) {what}",
        "GRID Sec. 6.3",
        ("geryon", "switchml", "atp", "grid", "grid-opt"),
        _grid_settings(scenario, {point: paper}),
        plot="lines",
        reference="grid",
        params=_GRID_OWN,
        notes=notes,
        timed=("grid-opt",),
    )


# ARO's defaults (Sec. IV-A): 200 workers, γ = 20 % INA, P = 4; Figs. 7b, 7c and 8b vary one of
# them, so at the default point the paper's values are Fig. 7a's.
_ARO_SCHEMES = ("random", "grid", "aggtree", "aro", "aro-acc", "atp")
_ARO_FIG7A = {"random": 7.92, "grid": 1.75, "aggtree": 8.76, "aro": 26.33}
# ARO/baseline ranges from the text: Sec. IV intro (AggTree per scenario) and the summary
# (RANDOM, GRID over all tests).
_ARO_OVERALL = {"aro/random": (2.8, 4.1), "aro/grid": (8.2, 41.6)}


def _aro_sweep(
    name: str,
    title: str,
    param: str,
    values: tuple,
    *,
    label: str,
    xlabel: str,
    default: float,
    scale: float = 1.0,
) -> Figure:
    """An SJST sweep of one of ARO's defaults, the rest as in Fig. 7a."""
    return Figure(
        name,
        title,
        "ARO Sec. IV-B",
        _ARO_SCHEMES,
        tuple(
            Setting(
                label.format(v),
                "aro-leaf-spine",
                {param: v},
                x=v * scale,
                paper=_ARO_FIG7A if v == default else {},
            )
            for v in values
        ),
        plot="lines",
        reference="aro",
        seeds=30,
        params=_PURE_GRID,
        xlabel=xlabel,
        paper_ratios={**_ARO_OVERALL, "aro/aggtree": (2.2, 4.0)},
        notes="The paper states values only at the default point (those of Fig. 7a) and "
        "ARO/AggTree 2.2-4.0x for SJST, ARO/RANDOM 2.8-4.1x and ARO/GRID 8.2-41.6x "
        "over all its tests.",
    )


def _aro_multi(
    name: str,
    title: str,
    shapes: tuple[tuple[int, int], ...],
    aggtree: tuple[float, float],
    paper_total: dict[int, dict[str, float]],
    seeds: int = 30,
) -> Figure:
    """SJMT (one job, tasks sharing its workers) or MJMT (jobs with disjoint workers), 100
    workers per job; panels (a) minimum and (b) total throughput over the tasks."""
    multi = len({j for j, _ in shapes}) > 1  # MJMT: the x axis counts jobs, not tasks
    return Figure(
        name,
        title,
        "ARO Sec. IV-B",
        _ARO_SCHEMES,
        tuple(
            Setting(
                f"{j}J{t}T",
                "aro-leaf-spine",
                {"workers": 100, "jobs": j, "tasks": t},
                x=j if multi else t,
                paper_total=paper_total.get(j * t, {}),
            )
            for j, t in shapes
        ),
        plot="groups",
        reference="aro",
        seeds=seeds,
        params=_PURE_GRID,
        xlabel="jobs (2 tasks each)" if multi else "tasks of the job",
        metrics=("min", "total"),
        paper_ratios={**_ARO_OVERALL, "aro/aggtree": aggtree},
        notes="Baselines route each task separately and the routes are overlaid (as ARO runs "
        "them); ratio ranges from the text, both metrics.",
    )


# GRID's own simulations score R-GRIA on model (1), which ignores links (Sec. 4.1), and ARO ran
# GRID the same way; the evaluator then scores the resulting routes on the real links.
_PURE_GRID = {"grid": {"links": False}}
# GRID Sec. 6.1 describes ATP with one level ("the first encountered aggregation node").
_GRID_PAPER = {**_PURE_GRID, "atp": {"ps_side": False}}
# Figs. 11-12: `grid` draws from both its LP variants; `grid-opt` solves GRID's own
# problem (1), which has no link rows (Sec. 4.1), so its model optimum is the one R-GRIA's
# draws are measured against.
_GRID_OWN = {"atp": {"ps_side": False}, "grid-opt": {"links": False}}
# Fig. 12(b), fat-tree, 100 workers: the only point of scenario (b) the text states.
_GRID_FIG12B = {"geryon": 1.0, "switchml": 8.9, "atp": 10.0, "grid": 23.5}

FIGURES: dict[str, Figure] = {
    f.name: f
    for f in (
        Figure(
            "grid-fig1",
            "GRID Fig. 1: minimum sending rate on the motivating example",
            "GRID Sec. 3.1",
            ("geryon", "atp", "switchml", "grid"),
            (
                Setting(
                    "grid-fig1.yaml",
                    "example",
                    {"file": "grid-fig1.yaml"},
                    paper={"geryon": 1.0, "atp": 2.43, "grid": 3.0},
                ),
            ),
            plot="bars",
            reference="grid",
            seeds=1,
        ),
        Figure(
            "aro-fig7a",
            "ARO Fig. 7a: SJST throughput, 200 workers, 20 % INA, 4 pipelines",
            "ARO Sec. V-B",
            ("random", "atp", "grid", "aggtree", "aro", "aro-acc"),
            (
                Setting(
                    "leaf-spine 24x24, 200 workers",
                    "aro-leaf-spine",
                    paper={"random": 7.92, "grid": 1.75, "aggtree": 8.76, "aro": 26.33},
                ),
            ),
            plot="violins",
            reference="aro",
            params=_PURE_GRID,
            notes="ARO-ACC: within 6.4 % of ARO (no value stated); ATP is not in ARO's figure "
            "(ARO's RANDOM is its upgrade of ATP).",
        ),
        _aro_sweep(
            "aro-fig7b",
            "ARO Fig. 7b: SJST throughput vs share of INA switches (200 workers, 4 pipelines)",
            "ina",
            (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7),
            label="{:.0%} INA",
            xlabel="INA-enabled switches (%)",
            default=0.2,
            scale=100,
        ),
        _aro_sweep(
            "aro-fig7c",
            "ARO Fig. 7c: SJST throughput vs workers (20 % INA, 4 pipelines)",
            "workers",
            (100, 200, 300, 400),
            label="{} workers",
            xlabel="number of workers",
            default=200,
        ),
        _aro_sweep(
            "aro-fig8b",
            "ARO Fig. 8b: SJST throughput vs pipelines per aggregator (200 workers, 20 % INA)",
            "pipelines",
            (1, 2, 4, 8),
            label="{} pipelines",
            xlabel="pipelines per INA switch (P)",
            default=4,
        ),
        _aro_multi(
            "aro-fig9",
            "ARO Fig. 9: SJMT, one job of 100 workers with 1-4 tasks",
            ((1, 1), (1, 2), (1, 3), (1, 4)),
            (1.8, 2.5),
            {4: {"aro": 100.0, "aro-acc": 100.0}},
        ),
        # ARO and ARO-ACC use their whole time limit at 3J2T-4J2T: 30 seeds at the 30 s we give
        # them take about 40 min on 2 cores, so fewer seeds by default (BENCHMARKS.md).
        _aro_multi(
            "aro-fig10",
            "ARO Fig. 10: MJMT, 1-4 jobs of 100 workers with 2 tasks each",
            ((1, 2), (2, 2), (3, 2), (4, 2)),
            (1.9, 2.3),
            {},
            seeds=10,
        ),
        _grid_figure(
            11,
            "a",
            "ToR-only INA",
            {"geryon": 2.5, "switchml": 10.0, "atp": 25.21, "grid": 30.0},
            notes="Fig. 11(a) at 40 workers is stated as ratios (GRID +19 % over ATP, 2x "
            "over SwitchML, 11x over Geryon); the absolute values assume Geryon = "
            "100 Gbps / 40.",
        ),
        _grid_figure(12, "b", "20 % random INA", _GRID_FIG12B),
        Figure(
            "grid-fig12-share",
            "Check of GRID Fig. 12(b): fat-tree, 100 workers, vs share of programmable switches",
            "GRID Sec. 6.3",
            ("geryon", "switchml", "atp", "random", "grid"),
            tuple(
                Setting(
                    f"{share:.0%} INA",
                    "grid-fabric",
                    {"kind": "fat-tree", "scenario": "b", "workers": 100, "share": share},
                    x=share * 100,
                    paper=_GRID_FIG12B if share == 0.2 else {},
                )
                for share in (0.2, 0.4, 0.6, 0.8, 1.0)
            ),
            plot="lines",
            reference="grid",
            params=_GRID_PAPER,
            xlabel="programmable switches (%)",
            notes="Not one of the paper's figures: Fig. 12(b)'s last point with the share of "
            "programmable switches varied, to test whether SwitchML's and ATP's stated values "
            "could come from aggregating above the racks (RANDOM: ARO's multi-level upgrade "
            "of ATP; `--param atp:levels=all`: every programmable switch on ATP's paths).",
        ),
        Figure(
            "smoke",
            "Smoke test: a small leaf-spine, every kind of scheme",
            "-",
            ("geryon", "atp", "aggtree", "grid"),
            (
                Setting(
                    "leaf-spine 4x2, 6 workers",
                    "aro-leaf-spine",
                    {
                        "workers": 6,
                        "leaves": 4,
                        "spines": 2,
                        "hosts_per_leaf": 4,
                        "ina": 0.5,
                        "pipelines": 2,
                    },
                ),
            ),
            plot="violins",
            reference="grid",
            seeds=3,
        ),
    )
}


# ------------------------------------------------------------------ running


def run_one(run: Run) -> dict[str, Any]:
    """Build, solve, evaluate: the record of one run (an `error` instead when it fails)."""
    from controller.evaluator.evaluate import evaluate
    from controller.solvers import SolveOptions, solve

    record: dict[str, Any] = {
        "index": run.index,
        "setting": run.setting.label,
        "seed": run.seed,
        "scheme": run.scheme,
    }
    try:
        network = BUILDERS[run.setting.builder](run.seed, **run.setting.kwargs)
        cpu = time.process_time()
        plan = solve(network, run.scheme, SolveOptions(run.time_limit, run.seed, None, run.params))
        cpu = time.process_time() - cpu
        result = evaluate(network, plan)
    except Exception as exc:  # one failing scheme must not lose the sweep
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc(limit=4)
        return record
    record.update(
        rate_gbps=min((t.rate_gbps for t in result.tasks), default=0.0),
        total_gbps=sum(t.rate_gbps for t in result.tasks),
        ps_flows=[t.flows_into_ps for t in result.tasks],  # what explains most gaps
        consistent=result.consistent,
        status=plan.status,
        solve_seconds=plan.solve_seconds,
        # this process's CPU time in the solve, solver threads included: on a shared machine
        # wall-clock time says more about the other load than about the scheme
        solve_cpu_seconds=cpu,
    )
    model = {k: plan.details[k] for k in _MODEL_DETAILS if k in plan.details}
    if model:  # GRID's problem (1): the plan's value there, the proven bound, R-GRIA's draws
        record["model"] = model
    return record


_MODEL_DETAILS = (
    "model_value_gbps",
    "model_bound_gbps",
    "model_status",
    "warm_start_gbps",
    "warm_start_lp",
    "variant",
    "variants",
)


def plan_runs(
    figure: Figure, seeds: int, schemes: tuple[str, ...], time_limit: float | None
) -> list[Run]:
    """Seed-major, so a sweep stopped early has the same seeds done for every setting."""
    runs: list[Run] = []
    for seed in range(seeds):
        for setting in figure.settings:
            for scheme in schemes:
                runs.append(
                    Run(
                        len(runs),
                        figure.name,
                        setting,
                        seed,
                        scheme,
                        figure.params.get(scheme, {}),
                        time_limit,
                    )
                )
    return runs


def execute(
    runs: list[Run],
    *,
    jobs: int | None = None,
    cluster: str | None = None,
    progress: bool = True,
    journal: Path | None = None,
) -> list[dict[str, Any]]:
    """Every run's record, in run order, computed locally or on a Dask cluster. With a
    `journal`, each record is appended to it as it arrives (a JSON line), and runs already
    recorded there are not computed again: a stopped sweep resumes where it was."""
    results: list[dict[str, Any] | None] = [None] * len(runs)
    done = _journaled(journal, runs)
    for run in runs:
        if (key := (run.setting.label, run.seed, run.scheme)) in done:
            results[run.index] = {**done[key], "index": run.index}
    todo = [run for run in runs if results[run.index] is None]
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not progress) as bar:
        task = bar.add_task("runs", total=len(runs), completed=len(runs) - len(todo))
        for record in _records(todo, jobs, cluster):
            results[record["index"]] = record
            if journal is not None:
                with journal.open("a") as f:
                    f.write(json.dumps(record, separators=(",", ":")) + "\n")
            last = f"{record['scheme']} seed {record['seed']}"
            bar.update(task, advance=1, description=f"runs (last: {last})")
    return [r for r in results if r is not None]


def _journaled(journal: Path | None, runs: list[Run]) -> dict[tuple, dict[str, Any]]:
    """Records of a journal matching these runs (same setting, seed and scheme), by run key."""
    if journal is None or not journal.exists():
        return {}
    wanted = {(r.setting.label, r.seed, r.scheme) for r in runs}
    done = {}
    for line in journal.read_text().splitlines():
        record = json.loads(line)
        if "journal" in record:
            continue
        if (key := (record["setting"], record["seed"], record["scheme"])) in wanted:
            done[key] = record
    return done


def _records(runs: list[Run], jobs: int | None, cluster: str | None) -> Iterator[dict[str, Any]]:
    if cluster:
        from distributed import Client
        from distributed import as_completed as dask_completed

        with Client(cluster) as client:
            futures = client.map(run_one, runs, pure=False)
            for future in dask_completed(futures):
                yield future.result()
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_one, run) for run in runs]
        for future in as_completed(futures):
            yield future.result()


# ------------------------------------------------------------------ summarising


_FIELD = {"min": "rate_gbps", "total": "total_gbps"}


def _paper(setting: Setting, metric: str) -> dict[str, float]:
    return setting.paper if metric == "min" else setting.paper_total


def summarise(
    figure: Figure, records: list[dict[str, Any]], schemes: tuple[str, ...]
) -> dict[str, Any]:
    """Per setting, metric and scheme: mean, spread and the paper's value; ratios to the
    reference next to the paper's, per setting or as the range its text states."""
    summary, ratios = [], []
    for setting in figure.settings:
        for metric in figure.metrics:
            rows = [_summary_row(setting, metric, scheme, records) for scheme in schemes]
            summary += rows
            means = {r["scheme"]: r["mean_gbps"] for r in rows if "mean_gbps" in r}
            ratios += _ratios(figure, setting, metric, means, schemes)
    return {"summary": summary, "ratios": ratios}


def _summary_row(
    setting: Setting, metric: str, scheme: str, records: list[dict[str, Any]]
) -> dict[str, Any]:
    mine = [r for r in records if r["setting"] == setting.label and r["scheme"] == scheme]
    rates = [r[_FIELD[metric]] for r in mine if "error" not in r]
    row = {
        "setting": setting.label,
        "panel": setting.panel,
        "x": setting.x,
        "metric": metric,
        "scheme": scheme,
        "runs": len(rates),
        "errors": len(mine) - len(rates),
        "paper_gbps": _paper(setting, metric).get(scheme),
    }
    if rates:
        row.update(
            mean_gbps=statistics.fmean(rates),
            min_gbps=min(rates),
            max_gbps=max(rates),
            stdev_gbps=statistics.pstdev(rates),
        )
        seconds = [r["solve_seconds"] for r in mine if "solve_seconds" in r]
        if seconds:
            row.update(mean_seconds=statistics.fmean(seconds), max_seconds=max(seconds))
    return row


def _ratios(
    figure: Figure, setting: Setting, metric: str, means: dict[str, float], schemes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Our reference/scheme ratio against the paper's point value, else its stated range
    (deviation: how far outside the range, relative to the nearest end)."""
    ref, paper, found = figure.reference, _paper(setting, metric), []
    for scheme in schemes:
        name = f"{ref}/{scheme}"
        if scheme == ref:
            continue
        if ref in paper and scheme in paper:
            low = high = paper[ref] / paper[scheme]
        elif name in figure.paper_ratios:
            low, high = figure.paper_ratios[name]
        else:
            continue
        ours = means[ref] / means[scheme] if means.get(scheme) and ref in means else None
        deviation = (
            None
            if ours is None
            else (ours / low - 1 if ours < low else ours / high - 1 if ours > high else 0.0)
        )
        found.append(
            {
                "setting": setting.label,
                "metric": metric,
                "ratio": name,
                "paper": low if low == high else [low, high],
                "ours": ours,
                "deviation": deviation,
                "flagged": deviation is None or abs(deviation) > DEVIATION,
            }
        )
    return found


def _fmt(value: float | None) -> str:
    return (
        "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"
    )


# ------------------------------------------------------------------ plots


def plot(
    figure: Figure,
    records: list[dict[str, Any]],
    summary: list[dict[str, Any]],
    schemes: tuple[str, ...],
    path: Path,
) -> None:
    """The paper's kind of plot: bars (Fig. 1), violins with means (ARO Fig. 7a), lines vs the
    swept parameter (GRID, ARO Figs. 7b-8b), bars per scenario (ARO Figs. 9-10); one panel per
    topology or metric, the paper's values as stars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (panel, metric)
        for panel in dict.fromkeys(s.panel for s in figure.settings)
        for metric in figure.metrics
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (panel, metric) in zip(axes[0], panels, strict=True):
        rows = [r for r in summary if r["panel"] == panel and r["metric"] == metric]
        if figure.plot == "groups":
            _group_bars(ax, figure, rows, schemes)
        elif figure.plot == "lines":
            for scheme in schemes:
                mine = [r for r in rows if r["scheme"] == scheme and "mean_gbps" in r]
                (line,) = ax.plot(
                    [r["x"] for r in mine],
                    [r["mean_gbps"] for r in mine],
                    marker="o",
                    label=scheme.upper(),
                )
                paper = [r for r in rows if r["scheme"] == scheme and r["paper_gbps"]]
                ax.scatter(
                    [r["x"] for r in paper],
                    [r["paper_gbps"] for r in paper],
                    marker="*",
                    s=120,
                    color=line.get_color(),
                    edgecolor="black",
                    label=f"{scheme.upper()} (paper)" if paper else None,
                )
            ax.set_xlabel(figure.xlabel)
        elif figure.plot == "violins":
            data = [
                [r["rate_gbps"] for r in records if r["scheme"] == s and "error" not in r] or [0.0]
                for s in schemes
            ]
            parts = ax.violinplot(data, showmeans=True, showextrema=True)
            parts["cmeans"].set_color("red")
            means = [
                (i + 1, r["paper_gbps"])
                for i, s in enumerate(schemes)
                for r in rows
                if r["scheme"] == s and r["paper_gbps"]
            ]
            if means:
                ax.scatter(
                    *zip(*means, strict=True),
                    marker="*",
                    s=120,
                    color="gold",
                    edgecolor="black",
                    zorder=3,
                    label="paper mean",
                )
            ax.set_xticks(range(1, len(schemes) + 1), [s.upper() for s in schemes])
        else:
            by = {r["scheme"]: r for r in rows}
            xs = range(len(schemes))
            ax.bar(
                [x - 0.2 for x in xs],
                [by[s].get("paper_gbps") or 0 for s in schemes],
                0.4,
                label="paper",
                color="lightgray",
                edgecolor="black",
            )
            ax.bar(
                [x + 0.2 for x in xs],
                [by[s].get("mean_gbps", 0) for s in schemes],
                0.4,
                label="ours (evaluator)",
            )
            ax.set_xticks(list(xs), [s.upper() for s in schemes])
        ax.set_ylabel("total throughput (Gbps)" if metric == "total" else "sending rate (Gbps)")
        many = len(figure.metrics) > 1
        ax.set_title(" · ".join(filter(None, (panel, f"{metric} over tasks" if many else ""))))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(figure.title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _group_bars(
    ax: Any, figure: Figure, rows: list[dict[str, Any]], schemes: tuple[str, ...]
) -> None:
    """One group of bars per setting, one bar per scheme; the paper's values as stars."""
    width = 0.8 / len(schemes)
    labels = [s.label for s in figure.settings]
    for i, scheme in enumerate(schemes):
        by = {r["setting"]: r for r in rows if r["scheme"] == scheme}
        xs = [k - 0.4 + width * (i + 0.5) for k in range(len(labels))]
        bars = ax.bar(
            xs, [by[lb].get("mean_gbps", 0.0) for lb in labels], width, label=scheme.upper()
        )
        stars = [
            (x, by[lb]["paper_gbps"])
            for x, lb in zip(xs, labels, strict=True)
            if by[lb]["paper_gbps"]
        ]
        if stars:
            ax.scatter(
                *zip(*stars, strict=True),
                marker="*",
                s=120,
                color=bars.patches[0].get_facecolor(),
                edgecolor="black",
                zorder=3,
                label=f"{scheme.upper()} (paper)",
            )
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel(figure.xlabel)


# ------------------------------------------------------------------ BENCHMARKS.md


def table_rows(figure: Figure, summary: list[dict[str, Any]], seeds: int, png: str) -> list[str]:
    """One row per setting (and metric): `scheme paper / ours` for each scheme."""
    rows = []
    for setting in figure.settings:
        for metric in figure.metrics:
            cells = []
            for r in summary:
                if r["setting"] == setting.label and r["metric"] == metric:
                    ours = _fmt(r.get("mean_gbps")) + (
                        f" ({r['errors']} failed)" if r["errors"] else ""
                    )
                    if r["scheme"] in figure.timed and "mean_seconds" in r:
                        ours += f" ({r['mean_seconds']:.2g} s)"
                    cells.append(f"{r['scheme']} {_fmt(r['paper_gbps'])} / {ours}")
            label = setting.label + (f" ({metric})" if len(figure.metrics) > 1 else "")
            rows.append(f"| [{figure.name}]({png}) | {label} | {seeds} | {' · '.join(cells)} |")
    return rows


_HEADER = "| figure | setting | seeds | scheme paper / ours (Gbps) |\n|---|---|---|---|"


def grid_optimum(figure: Figure, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per setting, R-GRIA against GRID's own optimum: λ* of problem (1) as `grid-opt` proves
    it, the best of R-GRIA's draws (the paper's LP, no link rows) scored in (1), and the plan
    `grid` keeps (best by the evaluator over both LP variants) scored in (1) (without link
    rows, so only next to `grid-opt` without them); on how many seeds `grid`'s evaluated rate
    is at least the better of its two LP variants' scores (what `grid` promises); `grid-opt`'s
    proofs and solve times."""
    pure = not figure.params.get("grid-opt", {}).get("links", True)
    rows = []
    for setting in figure.settings:
        mine = {
            (r["scheme"], r["seed"]): r
            for r in records
            if r["setting"] == setting.label and "error" not in r and "model" in r
        }
        seeds = sorted(seed for scheme, seed in mine if scheme == "grid-opt")
        if not seeds:
            continue
        opt = [mine["grid-opt", seed]["model"] for seed in seeds]
        star = [next(iter(m["model_bound_gbps"].values())) for m in opt]
        draws = [
            w / b
            for m, b in zip(opt, star, strict=True)
            if (w := next(iter(m["warm_start_gbps"].values()))) is not None
        ]
        kept = [
            next(iter(mine["grid", seed]["model"]["model_value_gbps"].values())) / b
            for seed, b in zip(seeds, star, strict=True)
            if ("grid", seed) in mine and pure
        ]
        variants = [
            (r["rate_gbps"], max(r["model"]["variants"].values()))
            for seed in sorted(s for k, s in mine if k == "grid")
            if "variants" in (r := mine["grid", seed])["model"]
        ]
        times = [mine["grid-opt", seed]["solve_seconds"] for seed in seeds]
        cpu = [c for seed in seeds if (c := mine["grid-opt", seed].get("solve_cpu_seconds"))]
        rows.append(
            {
                "setting": setting.label,
                "seeds": len(seeds),
                "optimum_gbps": statistics.fmean(star),
                "optimum_min_gbps": min(star),
                "optimum_max_gbps": max(star),
                "proven": sum(all(v == "optimal" for v in m["model_status"].values()) for m in opt),
                **_spread("rgria_draw_share", draws),
                **_spread("grid_plan_share", kept),
                "grid_seeds": len(variants),
                "grid_at_least_variants": sum(rate >= best * (1 - 1e-9) for rate, best in variants),
                "seconds_mean": statistics.fmean(times),
                "seconds_median": statistics.median(times),
                "seconds_max": max(times),
                "cpu_seconds_median": statistics.median(cpu) if cpu else None,
                "cpu_seconds_max": max(cpu, default=None),
            }
        )
    return rows


def _spread(name: str, values: list[float]) -> dict[str, float | None]:
    return {
        name: statistics.fmean(values) if values else None,
        f"{name}_min": min(values, default=None),
        f"{name}_max": max(values, default=None),
    }


def optimum_table(rows: list[dict[str, Any]], links: bool) -> list[str]:
    if not rows:
        return []
    title = (
        f"GRID's own optimum (problem (1), {'with' if links else 'no'} link rows, T = B_α; "
        "`grid-opt`, CP-SAT, 1 worker) against R-GRIA, scored in (1); shares are mean "
        "(min-max) over seeds; `grid` ≥ variants: seeds where `grid`'s evaluated rate is at "
        "least the better of its two LP variants:"
    )
    draws = "best draw of both LPs" if links else "best of 16 draws"  # grid-opt's warm start
    header = (
        f"| setting | seeds | λ* of (1) (Gbps) | proven optimal | R-GRIA's {draws} / λ* "
        "| `grid`'s plan / λ* | `grid` ≥ variants | grid-opt wall s (median / max) | "
        "grid-opt CPU s (median / max) |"
    )
    lines = ["", title, "", header, "|---|---|---|---|---|---|---|---|---|"]

    def share(r: dict[str, Any], name: str) -> str:
        return (
            "–"
            if r[name] is None
            else f"{r[name]:.0%} ({r[name + '_min']:.0%}-{r[name + '_max']:.0%})"
        )

    for r in rows:
        star = _fmt(r["optimum_gbps"]) + (
            ""
            if r["optimum_min_gbps"] == r["optimum_max_gbps"]
            else f" ({_fmt(r['optimum_min_gbps'])}-{_fmt(r['optimum_max_gbps'])})"
        )
        lines.append(
            f"| {r['setting']} | {r['seeds']} | {star} | "
            f"{r['proven']}/{r['seeds']} | {share(r, 'rgria_draw_share')} | "
            f"{share(r, 'grid_plan_share')} | "
            f"{r['grid_at_least_variants']}/{r['grid_seeds']} | "
            f"{r['seconds_median']:.2g} / {r['seconds_max']:.2g} | "
            + (
                "–"
                if r["cpu_seconds_median"] is None
                else f"{r['cpu_seconds_median']:.2g} / {r['cpu_seconds_max']:.2g}"
            )
            + " |"
        )
    return lines


def update_benchmarks(path: Path, figure: str, rows: list[str]) -> None:
    """Replace this figure's rows in our section of the page, leaving the rest untouched."""
    begin, end = f"<!-- compare:{figure} -->", f"<!-- /compare:{figure} -->"
    block = "\n".join([begin, "", _HEADER, *rows, "", end])
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        if SECTION not in text:
            text = (
                text.rstrip("\n")
                + f"\n\n{SECTION}\n\n"
                + (
                    "Rates in Gbps, `paper / ours`, ours the mean over seeds of the evaluator's "
                    "rate. Regenerate a figure's table with `ina bench compare --figure NAME`.\n"
                )
            )
        head, tail = text.split(SECTION, 1)
        nxt = tail.find("\n## ")
        section, after = (tail, "") if nxt < 0 else (tail[:nxt], tail[nxt:])
        text = head + SECTION + section.rstrip("\n") + "\n\n" + block + "\n" + after
    path.write_text(text)


# ------------------------------------------------------------------ command


def compare(
    figure_name: str,
    *,
    seeds: int | None = None,
    schemes: tuple[str, ...] | None = None,
    jobs: int | None = None,
    cluster: str | None = None,
    out: Path | None = None,
    benchmarks: Path | None = TABLES,
    time_limit: float | None = None,
    progress: bool = True,
    params: dict[str, dict[str, Any]] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Run a figure, write its JSON, PNG and table rows (TABLES); returns the JSON document.
    `params` (scheme → parameters) override the figure's, to test another reading. Every
    record is journaled in `<out>/records.jsonl`; `resume` reuses the runs recorded there by
    the same figure, parameters and time limit (else the journal starts afresh)."""
    from controller.solvers import get_solver, scheme_names

    figure = FIGURES[figure_name]
    if params:
        merged = {
            s: {**figure.params.get(s, {}), **params.get(s, {})} for s in {*figure.params, *params}
        }
        figure = replace(figure, params=merged)
    seeds = seeds or figure.seeds
    known = set(scheme_names())
    schemes = tuple(s for s in (schemes or figure.schemes) if s in known)
    for scheme in schemes:  # imported before the pool forks: edits made mid-sweep do not leak in
        get_solver(scheme)
    runs = plan_runs(figure, seeds, schemes, time_limit)
    out = out or ROOT / "out" / "bench" / "compare" / figure.name
    out.mkdir(parents=True, exist_ok=True)
    journal = _open_journal(out / "records.jsonl", figure, time_limit, resume)
    records = execute(runs, jobs=jobs, cluster=cluster, progress=progress, journal=journal)
    result = {
        "figure": figure.name,
        "title": figure.title,
        "source": figure.source,
        "notes": figure.notes,
        "seeds": seeds,
        "schemes": list(schemes),
        "params": figure.params,
        "executor": f"dask {cluster}" if cluster else "local process pool",
        "settings": [asdict(s) for s in figure.settings],
        "runs": records,
        **summarise(figure, records, schemes),
        "grid_optimum": grid_optimum(figure, records),
    }
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    png = out / f"{figure.name}.png"
    plot(figure, records, result["summary"], schemes, png)
    if benchmarks is not None:
        link = DOCS / png.name
        (benchmarks.parent / DOCS).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, benchmarks.parent / link)
        compact = json.dumps(result, separators=(",", ":")) + "\n"  # committed: keep it small
        (benchmarks.parent / DOCS / f"{figure.name}.json").write_text(compact)
        update_benchmarks(
            benchmarks,
            figure.name,
            table_rows(figure, result["summary"], seeds, link.as_posix())
            + optimum_table(
                result["grid_optimum"], figure.params.get("grid-opt", {}).get("links", True)
            ),
        )
    return result


def _open_journal(path: Path, figure: Figure, time_limit: float | None, resume: bool) -> Path:
    """The journal, its first line naming what its runs were computed with; resuming from a
    journal of other parameters is refused rather than mixing two experiments."""
    header = {"figure": figure.name, "params": figure.params, "time_limit": time_limit}
    if resume and path.exists():
        first = json.loads(path.read_text().split("\n", 1)[0] or "{}")
        if first.get("journal") != header:
            raise InputError(
                "--resume",
                str(path),
                f"holds runs of {first.get('journal')}, "
                f"not of {header}; rerun without --resume or with the same "
                "--figure, --param and --time-limit",
            )
        return path
    path.write_text(json.dumps({"journal": header}, separators=(",", ":")) + "\n")
    return path


def _report(result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=result["title"])
    for col in ("setting", "metric", "scheme", "paper", "ours (mean)", "min", "max", "runs"):
        table.add_column(col)
    for r in result["summary"]:
        table.add_row(
            r["setting"],
            r["metric"],
            r["scheme"],
            _fmt(r["paper_gbps"]),
            _fmt(r.get("mean_gbps")),
            _fmt(r.get("min_gbps")),
            _fmt(r.get("max_gbps")),
            f"{r['runs']}" + (f" ({r['errors']} failed)" if r["errors"] else ""),
        )
    print_table(console, table)
    for q in result["ratios"]:
        if q["flagged"]:
            paper = (
                "-".join(map(_fmt, q["paper"]))
                if isinstance(q["paper"], list)
                else _fmt(q["paper"])
            )
            console.print(
                f"[yellow]ratio {q['ratio']} ({q['metric']}) at {q['setting']}: "
                f"paper {paper}, ours {_fmt(q['ours'])}[/yellow]"
            )
    for r in result["runs"]:
        if "error" in r:
            console.print(
                f"[red]{r['scheme']} seed {r['seed']} ({r['setting']}):[/red] {r['error']}",
                highlight=False,
            )


def scheme_params(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--param atp:levels=all` → {"atp": {"levels": "all"}}; values read as JSON if they parse."""
    params: dict[str, dict[str, Any]] = {}
    for item in items:
        scheme, sep, pair = item.partition(":")
        key, eq, text = pair.partition("=")
        if not (sep and eq and scheme and key):
            raise ValueError(f"--param {item!r}: expected SCHEME:KEY=VALUE")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        params.setdefault(scheme, {})[key] = value
    return params


def cmd_compare(args: argparse.Namespace) -> int:
    schemes = tuple(args.schemes.split(",")) if args.schemes else None
    result = compare(
        args.figure,
        seeds=args.seeds,
        schemes=schemes,
        jobs=args.jobs,
        cluster=args.cluster,
        out=Path(args.out) if args.out else None,
        benchmarks=None if args.no_benchmarks else Path(args.benchmarks),
        time_limit=args.time_limit,
        params=scheme_params(args.param),
        resume=args.resume,
    )
    _report(result)
    console.print(f"results in {args.out or Path('out/bench/compare') / args.figure}")
    return 0 if not any("error" in r for r in result["runs"]) else 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`compare` under `ina bench`."""
    p = sub.add_parser(
        "compare",
        help="rerun a paper's scheme comparison (JSON, PNG, "
        "table rows in docs/benchmarks/compare.md)",
    )
    p.add_argument(
        "--figure", required=True, choices=sorted(FIGURES), help="the paper's figure to rerun"
    )
    p.add_argument("--seeds", type=int, help="seeds per setting (default: the paper's)")
    p.add_argument("--schemes", help="comma-separated subset of the figure's schemes")
    p.add_argument("--jobs", type=int, help="local worker processes (default: CPU count)")
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="Dask scheduler address (tcp://host:8786) instead of local processes",
    )
    p.add_argument("--time-limit", type=float, metavar="S", help="per-solve time limit")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="SCHEME:KEY=VALUE",
        help="override a scheme's parameter in this figure, repeatable (e.g. "
        "atp:levels=all; add --no-benchmarks to keep the figure's rows)",
    )
    p.add_argument("--out", metavar="DIR", help="output folder (default out/bench/compare/NAME)")
    p.add_argument(
        "--benchmarks",
        default=str(TABLES),
        help="the page of tables to update (default: the repository's docs/benchmarks/compare.md)",
    )
    p.add_argument("--no-benchmarks", action="store_true", help="do not touch that page")
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse the runs journaled in the output folder's records.jsonl by an "
        "earlier run of the same figure and parameters (a stopped sweep, or "
        "fewer --seeds to summarise what it finished)",
    )
    p.set_defaults(func=cmd_compare)
