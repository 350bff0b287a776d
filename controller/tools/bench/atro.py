"""`ina bench atro`: ATRO Fig. 3 (against fixed cablings of the same switches), Fig. 4 (60-90
workers), Fig. 5 (1-6 INA switches): rate, proven bound and solve time.

Setting (Sec. IV-A): 20 switches with 24 ports, 100 Gbps links, one PS, by default 4 INA
switches and 90 workers. ATRO gets the pool (`ina topo gen pool`) with L = 5, once per point
(nothing in it is random), in two forms: `atro` is the paper's model (`max_fan_in=0`) and
`atro-dp` adds the data plane's limit of MAX_FAN_IN (64) flows merged per aggregator. The baselines
cable the same 20 switches as a leaf-spine (10 leaves × 10 spines, 14 hosts per leaf) or a fat-tree
variant (k = 4: 4 cores, 8 aggregation, 8 edge switches, 12 hosts per edge), place the workers
and the PS at random (one seed per instance, the PS's leaf/edge INA, the other INA switches
drawn at random) and route with `aro` or, with every ToR able to aggregate and a budget of
that many aggregators, `spar`; `paring` places the task itself (`placement: free`: the PS and
the workers on any of the fabric's servers, the same INA switches as ARO's) and routes it on
its Steiner tree. Every plan is scored by the evaluator; one INA pipeline everywhere (ATRO's
aggregator merges every flow entering it).

Beyond the paper: `multi` splits the workers into 1-6 jobs on one pool, `large` puts 3 jobs
of 90-150 workers on it; `atro-mono` is `atro` with the paper's per-worker model alone
(`formulation=workers`), to measure the aggregated relaxation and the decomposition
(`controller/solvers/atro/relaxed.py`) against it under the same time limit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.model.topogen import InaOptions, Workload, fat_tree, leaf_spine, pool
from controller.solvers import SolveOptions, solve
from controller.tools.tables import print_table
from dataplane.frame import MAX_FAN_IN

console = Console()
SWITCHES, PORTS, CAPACITY = 20, 24, 100.0
AXIS_LABEL = {
    "workers": "workers",
    "ina": "INA switches",
    "jobs": "jobs (90 workers split)",
    "workers3": "workers (3 jobs)",
}
FIGURES: dict[str, dict[str, Any]] = {
    "3": {"axis": "workers", "points": [90], "schemes": "atro,atro-dp,aro,spar,paring"},
    "4": {"axis": "workers", "points": [60, 70, 80, 90], "schemes": "atro,atro-dp,aro,spar"},
    "5": {"axis": "ina", "points": [1, 2, 3, 4, 5, 6], "schemes": "atro,atro-dp,aro,spar"},
    # Beyond the paper (its Sec. V): 90 workers split into 1-6 jobs, one task and PS each.
    "multi": {"axis": "jobs", "points": [1, 2, 3, 4, 5, 6], "schemes": "atro,atro-mono,aro,spar"},
    # Larger pools: 3 jobs of 90-150 workers in all (the monolithic model times out).
    "large": {"axis": "workers3", "points": [90, 120, 150], "schemes": "atro,atro-mono"},
}
# What the paper's text states (Sec. IV-B), Gbps. Fig. 3 gives ATRO's 50 Gbps and the
# improvement factors over each baseline (ARO 3.77/9.67, PARING 7.06/15.2, SPAR 6.17/6.73
# on leaf-spine/fat-tree); Fig. 4 "100 Gbps up to 80 workers, 50 at 90"; Fig. 5 "about
# 33 Gbps at 4 aggregators, 100 Gbps from 6".
PAPER: dict[str, dict[tuple[str, int], float]] = {
    "3": {
        ("atro", 90): 50.0,
        ("aro leaf-spine", 90): 50 / 3.77,
        ("aro fat-tree", 90): 50 / 9.67,
        ("paring leaf-spine", 90): 50 / 7.06,
        ("paring fat-tree", 90): 50 / 15.2,
        ("spar leaf-spine", 90): 50 / 6.17,
        ("spar fat-tree", 90): 50 / 6.73,
    },
    "4": {("atro", 60): 100.0, ("atro", 70): 100.0, ("atro", 80): 100.0, ("atro", 90): 50.0},
    "5": {("atro", 4): 33.0, ("atro", 6): 100.0},
    "multi": {},
    "large": {},
}


def add_parser(bench: argparse._SubParsersAction) -> None:
    p = bench.add_parser("atro", help="ATRO Fig. 3 (vs fixed cablings), 4 (workers), 5 (INA)")
    p.add_argument(
        "--figure",
        choices=sorted(FIGURES),
        default="3",
        help="3, 4, 5 as the paper; multi: several jobs on one pool (beyond it)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=5,
        help="random placements per baseline point (default 5; the paper: 30)",
    )
    p.add_argument(
        "--schemes",
        default=None,
        help=f"atro (paper model), atro-dp (fan-in ≤ {MAX_FAN_IN}), atro-mono (atro, "
        "per-worker model alone), aro, spar, paring (one job); default: the "
        "figure's",
    )
    p.add_argument("--time-limit", type=float, default=60.0, help="per solve (s)")
    p.add_argument("--out", default="out/bench/atro", help="output directory")
    p.set_defaults(func=run)


def instances(figure: str, schemes: list[str], seeds: int) -> list[dict[str, Any]]:
    """(point, scheme, topology kind, seed) of every solve, ATRO once per point."""
    fig = FIGURES[figure]
    jobs = []
    for point in fig["points"]:
        workers, ina, jobs_ = {
            "workers": (point, 4, 1),
            "ina": (90, point, 1),
            "jobs": (90, 4, point),
            "workers3": (point, 4, 3),
        }[fig["axis"]]
        for scheme in schemes:
            if scheme == "paring" and jobs_ > 1:
                continue  # PARING places one task
            if scheme.startswith("atro"):
                jobs.append(
                    {
                        "point": point,
                        "workers": workers,
                        "ina": ina,
                        "jobs": jobs_,
                        "scheme": scheme,
                        "fabric": "pool",
                        "seed": 0,
                    }
                )
                continue
            for fabric in ("leaf-spine", "fat-tree"):
                jobs += [
                    {
                        "point": point,
                        "workers": workers,
                        "ina": ina,
                        "jobs": jobs_,
                        "scheme": scheme,
                        "fabric": fabric,
                        "seed": seed,
                    }
                    for seed in range(seeds)
                ]
    return jobs


def document(job: dict[str, Any]) -> dict[str, Any]:
    workers, ina, seed, count = job["workers"], job["ina"], job["seed"], job["jobs"]
    if job["fabric"] == "pool":
        doc = pool(
            switches=SWITCHES,
            max_ports=PORTS,
            workers=workers,
            capacity_gbps=CAPACITY,
            ina=InaOptions(ina / SWITCHES, pipelines=1),
        )
        return _split_jobs(doc, count) if count > 1 else doc
    if job["scheme"] == "spar":  # SPAR places the aggregators itself, on ToRs only
        tors = (
            [f"L{i}" for i in range(10)]
            if job["fabric"] == "leaf-spine"
            else [f"E{p}_{j}" for p in range(4) for j in range(2)]
        )
        options = InaOptions(tors, pipelines=1)
    else:
        options = InaOptions(ina / SWITCHES, pipelines=1)
    load = Workload(jobs=count, workers_per_job=workers // count)
    if job["fabric"] == "leaf-spine":
        doc = leaf_spine(
            leaves=10,
            spines=10,
            hosts_per_leaf=14,
            capacity_gbps=CAPACITY,
            ina=options,
            workload=load,
            seed=seed,
        )
    else:
        doc = fat_tree(
            k=4, hosts_per_edge=12, capacity_gbps=CAPACITY, ina=options, workload=load, seed=seed
        )
    if job["scheme"] == "paring":  # PARING chooses the PS and the workers among the servers
        doc["jobs"][0]["tasks"][0]["placement"] = "free"
    return doc


def _split_jobs(doc: dict[str, Any], count: int) -> dict[str, Any]:
    """The pool's workers split into `count` jobs of one task each, job j with PS `PS<j>`
    (PS0 is the pool's `PS`), every PS a candidate of every switch."""
    switches = [s["name"] for s in doc["switches"]]
    workers = doc["jobs"][0]["tasks"][0]["workers"]
    per = len(workers) // count
    jobs = []
    for j in range(count):
        ps = "PS" if j == 0 else f"PS{j}"
        if j:
            doc["hosts"].append({"name": ps, "role": "ps"})
            doc["links"] += [{"a": ps, "b": s, "capacity_gbps": CAPACITY} for s in switches]
        jobs.append(
            {
                "name": f"job{j}",
                "tasks": [{"name": "t0", "ps": ps, "workers": workers[j * per : (j + 1) * per]}],
            }
        )
    doc["jobs"] = jobs
    return doc


def run_one(job: dict[str, Any], limit: float) -> dict[str, Any]:
    network = build_network(document(job), f"{job['fabric']} seed {job['seed']}")
    scheme = job["scheme"]
    params: dict[str, Any] = {}
    if scheme == "atro":
        params = {"max_fan_in": 0}
    elif scheme == "atro-mono":
        scheme, params = "atro", {"max_fan_in": 0, "formulation": "workers"}
    elif scheme == "atro-dp":
        scheme = "atro"
    elif scheme == "spar":
        params = {"aggregators": job["ina"]}
    started = time.perf_counter()
    plan = solve(network, scheme, SolveOptions(time_limit=limit, seed=job["seed"], params=params))
    wall = time.perf_counter() - started
    if plan.patch_panel is not None:
        from controller.model.patch_panel import chosen_topology

        network = build_network(chosen_topology(network, plan), "chosen")
    result = evaluate(network, plan) if plan.tasks else None
    return {
        **job,
        "status": plan.status,
        # the slowest task's rate (max-min; one task: its rate)
        "rate_gbps": min(te.rate_gbps for te in result.tasks) if result else 0.0,
        "objective": plan.objective,
        "claimed_gbps": plan.objective,
        "bound_gbps": plan.bound,
        "solve_seconds": plan.solve_seconds,
        "wall_seconds": wall,
        "consistent": bool(result and result.consistent),
        "links_built": len(plan.patch_panel or []),
    }


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    schemes = [s for s in (args.schemes or FIGURES[args.figure]["schemes"]).split(",") if s]
    jobs = instances(args.figure, schemes, args.seeds)
    rows: list[dict[str, Any]] = []
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(f"ATRO Fig. {args.figure}", total=len(jobs))
        for job in jobs:
            progress.update(
                bar,
                description=f"{job['point']} {job['scheme']} {job['fabric']} seed {job['seed']}",
            )
            rows.append(run_one(job, args.time_limit))
            progress.advance(bar)
            _save(out, args.figure, rows)
    summary = summarize(args.figure, rows)
    _save(out, args.figure, rows, summary)
    _print(args.figure, summary)
    _plot(out, args.figure, summary)
    console.print(f"results in {out}/fig{args.figure}.json and {out}/fig{args.figure}.png")
    return 0


def summarize(figure: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        label = r["scheme"] if r["fabric"] == "pool" else f"{r['scheme']} {r['fabric']}"
        groups.setdefault((r["point"], label), []).append(r)
    return [
        {
            "point": point,
            "series": label,
            "instances": len(rs),
            "rate_mean": statistics.fmean(r["rate_gbps"] for r in rs),
            "objective_mean": statistics.fmean(r["objective"] for r in rs),
            "bound_mean": None
            if any(r["bound_gbps"] is None for r in rs)
            else statistics.fmean(r["bound_gbps"] for r in rs),
            "solve_median_s": statistics.median(r["solve_seconds"] for r in rs),
            "solve_max_s": max(r["solve_seconds"] for r in rs),
            "optimal": sum(r["status"] == "optimal" for r in rs),
            "consistent": sum(r["consistent"] for r in rs),
            "paper": PAPER[figure].get((label, point)),
        }
        for (point, label), rs in groups.items()
    ]


def _save(out: Path, figure: str, rows: list, summary: list | None = None) -> None:
    data = {
        "figure": figure,
        "axis": FIGURES[figure]["axis"],
        "paper": {f"{k[0]} @ {k[1]}": v for k, v in PAPER[figure].items()},
        "instances": rows,
        "summary": summary or summarize(figure, rows),
    }
    (out / f"fig{figure}.json").write_text(json.dumps(data, indent=2) + "\n")


def _print(figure: str, summary: list[dict[str, Any]]) -> None:
    axis = FIGURES[figure]["axis"]
    table = Table(
        title=f"ATRO Fig. {figure}: rate of the slowest task (Gbps), objective "
        f"(Eq. 1-3) and its bound vs {AXIS_LABEL[axis]}"
    )
    for col in (
        axis,
        "series",
        "n",
        "rate",
        "objective",
        "bound",
        "paper",
        "t median",
        "t max",
        "optimal",
        "consistent",
    ):
        table.add_column(col, no_wrap=True)
    for s in summary:
        table.add_row(
            str(s["point"]),
            s["series"],
            str(s["instances"]),
            f"{s['rate_mean']:.2f}",
            f"{s['objective_mean']:.2f}",
            "-" if s["bound_mean"] is None else f"{s['bound_mean']:.2f}",
            "-" if s["paper"] is None else f"{s['paper']:.2f}",
            f"{s['solve_median_s']:.2f}s",
            f"{s['solve_max_s']:.2f}s",
            str(s["optimal"]),
            str(s["consistent"]),
        )
    # Wide enough for whole numbers when piped into a log (rich assumes 80 columns there).
    print_table(console, table)


def _plot(out: Path, figure: str, summary: list[dict[str, Any]]) -> None:
    """Mean rate per series (stars: the paper's stated values) and median solve time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, tx) = plt.subplots(1, 2, figsize=(11, 4))
    axis = FIGURES[figure]["axis"]
    for series in dict.fromkeys(s["series"] for s in summary):
        mine = sorted(
            (s["point"], s["rate_mean"], s["solve_median_s"])
            for s in summary
            if s["series"] == series
        )
        xs = [m[0] for m in mine]
        if len(xs) == 1:
            (line,) = ax.plot([series], [mine[0][1]], marker="o", linestyle="")
        else:
            (line,) = ax.plot(xs, [m[1] for m in mine], marker="o", label=series)
        paper = [(p, v) for (lab, p), v in PAPER[figure].items() if lab == series]
        if paper:
            px = [series] * len(paper) if len(xs) == 1 else [p for p, _v in paper]
            ax.scatter(
                px,
                [v for _p, v in paper],
                marker="*",
                s=140,
                color=line.get_color(),
                edgecolor="black",
                zorder=3,
            )
        tx.plot(
            [series] if len(xs) == 1 else xs,
            [m[2] for m in mine],
            marker="o",
            label=series,
            color=line.get_color(),
        )
    ax.set_ylabel("AllReduce rate (Gbps)")
    ax.set_title(f"ATRO Fig. {figure} (stars: the paper's stated values)")
    if figure == "3":
        ax.tick_params(axis="x", labelrotation=30)
    else:
        ax.set_xlabel(f"number of {AXIS_LABEL[axis]}")
        ax.legend(fontsize=8)
    tx.set_ylabel("median solve time (s)")
    tx.set_yscale("log")
    tx.set_title("solve time (shared 2-core machine)")
    if figure == "3":
        tx.tick_params(axis="x", labelrotation=30)
    else:
        tx.set_xlabel(f"number of {AXIS_LABEL[axis]}")
        tx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"fig{figure}.png", dpi=120)
    plt.close(fig)
