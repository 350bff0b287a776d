"""`ina bench aro`: ARO variants on the paper's SJST default and the Fig. 11 MJMT setting.

SJST (Fig. 7a): leaf-spine 24 leaves × 24 servers, 24 spines, 100 Gbps, 20 % of the switches
INA with 4 pipelines (the PS's leaf always), 200 random workers, one instance per seed.
MJMT (Fig. 11): 24λ leaves and 24λ spines, 5 jobs of one task with 100λ workers each.
Every plan is re-scored by the evaluator; a plan whose evaluated rate differs from its claim
is reported (`exact: false`). Instances run one after the other (the machine has 2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.model.topogen import Document, InaOptions, Workload, leaf_spine
from controller.solvers import SolveOptions, solve
from controller.tools.tables import print_table

console = Console()
SJST_VARIANTS = ["aro", "aro-acc", "aro-sro", "aro-app", "aro-raw"]
PAPER = {"aro": 26.33, "acc_loss": 0.064}


def aro_leaf_spine(
    seed: int,
    *,
    leaves: int = 24,
    spines: int = 24,
    hosts_per_leaf: int = 24,
    ina: float = 0.2,
    pipelines: int = 4,
    jobs: int = 1,
    tasks: int = 1,
    workers: int = 200,
) -> Document:
    """ARO Sec. V-A cluster from the project's generator (also used by `ina bench compare`).

    100 Gbps links, a fraction `ina` of the switches INA with `pipelines` pipelines (the PSs'
    leaves always), PS of task i under leaf i, disjoint random `workers` per job shared by its
    `tasks`. The grouped port layout puts a leaf's servers and its spine uplinks on different
    pipelines, as on a Tofino front panel.
    """
    return leaf_spine(
        leaves=leaves,
        spines=spines,
        hosts_per_leaf=hosts_per_leaf,
        ina=InaOptions(ina=ina, pipelines=pipelines),
        workload=Workload(jobs=jobs, tasks_per_job=tasks, workers_per_job=workers),
        seed=seed,
    )


def add_parser(bench: argparse._SubParsersAction) -> None:
    p = bench.add_parser("aro", help="ARO variants: SJST default (Fig. 7a), MJMT (Fig. 11)")
    p.add_argument(
        "--setting",
        choices=["sjst", "mjmt", "all"],
        default="sjst",
        help="sjst: one job, one task (Fig. 7a); mjmt: several jobs and tasks "
        "(Fig. 11); all: both (default sjst)",
    )
    p.add_argument("--seeds", type=int, default=10, help="instances per setting (default 10)")
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seed of the first instance; the others follow (default 0)",
    )
    p.add_argument(
        "--variants",
        default=",".join(SJST_VARIANTS),
        help="comma-separated SJST variants (default: %(default)s)",
    )
    p.add_argument(
        "--mjmt-variants",
        default="aro-acc,aro",
        help="comma-separated MJMT variants (default: %(default)s)",
    )
    p.add_argument("--lambdas", default="3,4,5", help="MJMT scales λ (default: %(default)s)")
    p.add_argument("--time-limit", type=float, default=60.0, help="SJST limit per solve (s)")
    p.add_argument(
        "--mjmt-limits",
        default="aro-acc=60,aro=300",
        help="MJMT limit per variant, VARIANT=SECONDS,... (default: %(default)s)",
    )
    p.add_argument("--out", default="out/bench/aro", help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    jobs: list[tuple[str, dict[str, Any], str, float]] = []
    if args.setting in ("sjst", "all"):
        for seed in seeds:
            for v in _split(args.variants):
                jobs.append(("sjst", {"seed": seed}, v, args.time_limit))
    if args.setting in ("mjmt", "all"):
        limits = {k: float(s) for k, s in (kv.split("=") for kv in _split(args.mjmt_limits))}
        for lam in (int(x) for x in _split(args.lambdas)):
            for seed in seeds:
                for v in _split(args.mjmt_variants):
                    jobs.append(
                        (f"mjmt-l{lam}", {"seed": seed, "lam": lam}, v, limits.get(v, 300.0))
                    )
    rows = []
    with Progress(console=console) as progress:
        bar = progress.add_task("ARO benchmark", total=len(jobs))
        for setting, spec, variant, limit in jobs:
            progress.update(bar, description=f"{setting} seed {spec['seed']} {variant}")
            rows.append(_instance(setting, spec, variant, limit))
            _save(out, rows)
            progress.advance(bar)
    summary = summarize(rows)
    _save(out, rows, summary)
    _print(summary)
    _plot(out, rows)
    console.print(f"results in {out}/aro.json and {out}/aro.png")
    return 0


def _split(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _instance(setting: str, spec: dict[str, Any], variant: str, limit: float) -> dict[str, Any]:
    if setting == "sjst":
        doc = aro_leaf_spine(spec["seed"])
    else:
        lam = spec["lam"]
        doc = aro_leaf_spine(
            spec["seed"], leaves=24 * lam, spines=24 * lam, jobs=5, workers=100 * lam
        )
    network = build_network(doc, source=f"aro {setting} seed {spec['seed']}")
    started = time.perf_counter()
    plan = solve(network, variant, SolveOptions(time_limit=limit, seed=0))
    wall = time.perf_counter() - started
    result = evaluate(network, plan)
    exact = result.consistent and all(
        abs(te.rate_gbps - tp.rate_gbps) <= 1e-6 * max(1.0, tp.rate_gbps)
        for tp, te in zip(plan.tasks, result.tasks, strict=True)
    )
    return {
        "setting": setting,
        **spec,
        "variant": variant,
        "time_limit": limit,
        "status": plan.status,
        "objective_gbps": plan.objective,
        "bound_gbps": plan.bound,
        "gap": plan.gap,
        "model_objective_gbps": plan.details.get("model_objective_gbps"),
        "model_bound_gbps": plan.details.get("model_bound_gbps"),
        "solve_seconds": plan.solve_seconds,
        "wall_seconds": wall,
        "rates_gbps": [tp.rate_gbps for tp in plan.tasks],
        "exact": exact,
        "stages": plan.details.get("stages", []),
        "problems": result.problems[:5],
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["setting"], r["variant"]), []).append(r)
    out = []
    for (setting, variant), rs in groups.items():
        thr = [r["objective_gbps"] for r in rs]
        secs = [r["solve_seconds"] for r in rs]
        gaps = [r["gap"] for r in rs if r["gap"] is not None]
        out.append(
            {
                "setting": setting,
                "variant": variant,
                "instances": len(rs),
                "throughput_mean": statistics.fmean(thr),
                "throughput_min": min(thr),
                "throughput_max": max(thr),
                "solve_median_s": statistics.median(secs),
                "solve_max_s": max(secs),
                "gap_mean": statistics.fmean(gaps) if gaps else None,
                "gap_max": max(gaps) if gaps else None,
                "optimal": sum(r["status"] == "optimal" for r in rs),
                "exact": sum(r["exact"] for r in rs),
            }
        )
    return out


def _save(out: Path, rows: list[dict[str, Any]], summary: list | None = None) -> None:
    data = {"paper": PAPER, "instances": rows, "summary": summary or summarize(rows)}
    (out / "aro.json").write_text(json.dumps(data, indent=2) + "\n")


def _print(summary: list[dict[str, Any]]) -> None:
    table = Table(title="ARO benchmark")
    for col in (
        "setting",
        "variant",
        "n",
        "thr mean",
        "min",
        "max",
        "t median",
        "t max",
        "gap mean",
        "optimal",
        "exact",
    ):
        table.add_column(col)
    for s in summary:
        gap = "-" if s["gap_mean"] is None else f"{s['gap_mean']:.2%}"
        table.add_row(
            s["setting"],
            s["variant"],
            str(s["instances"]),
            f"{s['throughput_mean']:.2f}",
            f"{s['throughput_min']:.2f}",
            f"{s['throughput_max']:.2f}",
            f"{s['solve_median_s']:.2f}s",
            f"{s['solve_max_s']:.2f}s",
            gap,
            str(s["optimal"]),
            str(s["exact"]),
        )
    print_table(console, table)


def _plot(out: Path, rows: list[dict[str, Any]]) -> None:
    """Violin of throughput per variant and setting (like Fig. 7a), with the mean marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({r["setting"] for r in rows})
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 4), squeeze=False)
    for ax, setting in zip(axes[0], settings, strict=True):
        variants = list(dict.fromkeys(r["variant"] for r in rows if r["setting"] == setting))
        data = [
            [r["objective_gbps"] for r in rows if r["setting"] == setting and r["variant"] == v]
            for v in variants
        ]
        ax.violinplot(data, showmeans=True, showextrema=True)
        # A variant with one value for every seed draws no violin: mark every mean.
        ax.scatter(
            range(1, len(data) + 1),
            [statistics.fmean(d) for d in data],
            marker="o",
            color="black",
            zorder=3,
            s=18,
            label="mean",
        )
        ax.set_xticks(range(1, len(variants) + 1), variants, rotation=20)
        ax.set_ylabel("throughput (Gbps)" if setting == "sjst" else "objective Eq. (3) (Gbps)")
        ax.set_title(setting)
        if setting == "sjst":
            ax.axhline(
                PAPER["aro"], color="red", linestyle="--", linewidth=1, label="paper ARO mean 26.33"
            )
        ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "aro.png", dpi=120)
    plt.close(fig)
