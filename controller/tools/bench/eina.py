"""`ina bench eina`: EINA Fig. 2a-2f (throughput against one setting), Fig. 3 (MIQCP stand-in
`eina` against IQCP `eina-iqcp`) and `huge` (`eina-fast` at 100-1,000 aggregators x 8 PSs).

Sec. IV-A's default: `ina topo gen edge` clusters of 12 aggregators with 5-10 workers each,
2 PSs, aggregation, DCN ingress and egress capacities drawn from 200-300 Gbps, PS p at
aggregator p, every PS with all workers (EINA shards the model). Each figure varies one of
them: 2a the PS count, 2b the aggregators, 2c the workers per aggregator, 2d/2e/2f the range
of the aggregation / ingress / egress capacities (the paper does not print those x values;
ours step the range by 100 Gbps around the default). Fig. 3: 50 aggregators, 10 of them
without workers, capacities 200-400 Gbps, 2 and 4 PSs. `huge`: 8 PSs, a fifth of the
aggregators without workers, capacities 200-400 Gbps.

Every plan is scored by the evaluator. `--aggregates` picks the terms: `all` (default,
EINA's: every flow entering an aggregator is charged to it) or `addressed` (a flow crossing an
aggregator unmerged is free: the terms the paper's GRID/ATP numbers and EINA+'s bypass need,
see `controller/solvers/eina_plus`); the generated files are the same otherwise.
Instances run one after the other (2-core machine). The paper does not state its seed count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.model.topogen import edge
from controller.solvers import SolveOptions, solve
from controller.tools.tables import print_table

console = Console()
BASELINES = "grid,atp,rr"
WIDE = {
    "aggregation_gbps": (200.0, 400.0),
    "ingress_gbps": (200.0, 400.0),
    "egress_gbps": (200.0, 400.0),
}


def _range(text: str) -> tuple[float, float]:
    low, high = text.split("-")
    return float(low), float(high)


def _ranged(key: str) -> Callable[[str], dict[str, Any]]:
    def settings(value: str) -> dict[str, Any]:
        low, high = _range(value)
        return {key: (int(low), int(high)) if key == "workers_per_aggregator" else (low, high)}

    return settings


# figure → x label, default x values, the edge generator's settings for a value, schemes
FIGURES: dict[str, dict[str, Any]] = {
    "2a": {
        "x": "number of PSs",
        "values": "1,2,3,4,5",
        "edge": lambda v: {"ps": int(v)},
        "schemes": f"eina,eina-iqcp,eina-plus,eina-fast,{BASELINES}",
    },
    "2b": {
        "x": "number of aggregators",
        "values": "10,15,20,25",
        "edge": lambda v: {"aggregators": int(v)},
        "schemes": f"eina,eina-fast,{BASELINES}",
    },
    "2c": {
        "x": "workers per aggregator",
        "values": "5-10,10-15,15-20,20-25,25-30,30-35",
        "edge": _ranged("workers_per_aggregator"),
        "schemes": f"eina,eina-fast,{BASELINES}",
    },
    "2d": {
        "x": "aggregation capacity (Gbps)",
        "values": "100-200,200-300,300-400,400-500",
        "edge": _ranged("aggregation_gbps"),
        "schemes": f"eina,eina-fast,{BASELINES}",
    },
    "2e": {
        "x": "DCN ingress capacity (Gbps)",
        "values": "100-200,200-300,300-400,400-500",
        "edge": _ranged("ingress_gbps"),
        "schemes": f"eina,eina-fast,{BASELINES}",
    },
    "2f": {
        "x": "DCN egress capacity (Gbps)",
        "values": "100-200,200-300,300-400,400-500",
        "edge": _ranged("egress_gbps"),
        "schemes": f"eina,eina-fast,{BASELINES}",
    },
    "3": {
        "x": "number of PSs",
        "values": "2,4",
        "edge": lambda v: {"ps": int(v), "aggregators": 50, "empty_aggregators": 10, **WIDE},
        "schemes": "eina,eina-iqcp",
    },
    "huge": {
        "x": "number of aggregators",
        "values": "100,300,1000",
        "edge": lambda v: {
            "ps": 8,
            "aggregators": int(v),
            "empty_aggregators": int(v) // 5,
            **WIDE,
        },
        "schemes": "eina-fast",
    },
}
DEFAULTS = {"aggregators": 12, "ps": 2}  # Sec. IV-A
# The values the text states (Sec. IV-B), Gbps, by figure and x value. 2b: the text gives
# one set "as the number of edge aggregators increases to 20 and 25"; shown at both.
PAPER: dict[str, dict[str, dict[str, float]]] = {
    "2a": {
        "1": {"eina": 20.3, "grid": 5.88, "atp": 9.9, "rr": 16.72},
        "5": {"eina": 19.90, "grid": 25.32, "atp": 19.90, "rr": 17.23},
    },
    "2b": {
        "15": {"eina": 39.4, "grid": 33.72, "atp": 20.53, "rr": 30.41},
        "20": {"eina": 7.84, "grid": 8.95, "atp": 7.84, "rr": 8.53},
        "25": {"eina": 7.84, "grid": 8.95, "atp": 7.84, "rr": 8.53},
    },
    "2c": {
        "10-15": {"eina": 39.2, "grid": 37.04, "atp": 39.0, "rr": 29.23},
        "30-35": {"eina": 39.4, "grid": 18.04, "atp": 13.0, "rr": 28.42},
    },
}


def add_parser(bench: argparse._SubParsersAction) -> None:
    p = bench.add_parser("eina", help="EINA Figs. 2a-2f and 3, eina-fast at huge scale")
    p.add_argument(
        "--figure",
        choices=sorted(FIGURES),
        default="2a",
        help="the paper's figure to rerun (default 2a)",
    )
    p.add_argument(
        "--values", help="x values, comma-separated (ranges as LOW-HIGH); default: the figure's"
    )
    p.add_argument(
        "--ps",
        help="PS counts for 2a and 3 (same as --values there); "
        "elsewhere the fixed PS count (default 2)",
    )
    p.add_argument(
        "--aggregators",
        type=int,
        help="fixed aggregator count (default: 12, 50 for 3; 2b and huge vary it)",
    )
    p.add_argument(
        "--aggregates",
        choices=("all", "addressed"),
        default="all",
        help="scoring terms (default all, EINA's)",
    )
    p.add_argument("--seeds", type=int, default=5, help="instances per point (default 5)")
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seed of the first instance; the others follow (default 0)",
    )
    p.add_argument("--schemes", help="default: the figure's")
    p.add_argument("--time-limit", type=float, default=60.0, help="per solve (s)")
    p.add_argument("--out", default="out/bench/eina", help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fig = FIGURES[args.figure]
    varies_ps = args.figure in ("2a", "3")
    values = [
        v
        for v in (args.values or (args.ps if varies_ps else None) or fig["values"]).split(",")
        if v
    ]
    schemes = [s for s in (args.schemes or fig["schemes"]).split(",") if s]
    suffix = "" if args.aggregates == "all" else "-addressed"
    out = Path(args.out) / f"fig{args.figure}{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    with Progress(console=console) as progress:
        bar = progress.add_task(
            f"EINA Fig. {args.figure}", total=len(values) * len(seeds) * len(schemes)
        )
        for value in values:
            settings = {**DEFAULTS, **fig["edge"](value)}
            if args.aggregators and args.figure not in ("2b", "huge"):
                settings["aggregators"] = args.aggregators
            if args.ps and not varies_ps:
                settings["ps"] = int(args.ps)
            for seed in seeds:
                doc = edge(seed=seed, **settings)
                for sw in doc["switches"]:
                    if sw.get("ina"):
                        sw["aggregates"] = args.aggregates
                network = build_network(doc, source=f"edge {value} seed={seed}")
                for scheme in schemes:
                    progress.update(bar, description=f"{value} seed {seed} {scheme}")
                    rows.append(
                        {
                            "figure": args.figure,
                            "x": value,
                            "ps": settings["ps"],
                            "aggregates": args.aggregates,
                            **_instance(network, seed, scheme, args.time_limit),
                        }
                    )
                    _save(out, rows)
                    progress.advance(bar)
    summary = summarize(rows)
    _save(out, rows, summary)
    _print(summary, fig["x"])
    _plot(out, summary, args.figure, fig["x"], args.aggregates)
    console.print(f"results in {out}/eina.json and {out}/eina.png")
    return 0


def _instance(network, seed: int, scheme: str, limit: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        plan = solve(network, scheme, SolveOptions(time_limit=limit, seed=seed))
    except ValueError as exc:  # a scheme that gives up (GRID's LP under load): a row, not a stop
        return {
            "seed": seed,
            "scheme": scheme,
            "status": "error",
            "throughput_gbps": None,
            "claimed_gbps": None,
            "bound_gbps": None,
            "gap": None,
            "solve_seconds": time.perf_counter() - started,
            "wall_seconds": None,
            "consistent": False,
            "problems": [str(exc)],
            "winner": None,
        }
    wall = time.perf_counter() - started
    result = evaluate(network, plan)
    return {
        "seed": seed,
        "scheme": scheme,
        "status": plan.status,
        "throughput_gbps": sum(te.rate_gbps for te in result.tasks),
        "claimed_gbps": plan.objective,
        "bound_gbps": plan.bound,
        "gap": plan.gap,
        "solve_seconds": plan.solve_seconds,
        "wall_seconds": wall,
        "consistent": result.consistent,
        "problems": result.problems[:3],
        "winner": plan.details.get("winner"),
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    errors: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["x"], r["scheme"])
        if r["status"] == "error":
            errors[key] = errors.get(key, 0) + 1
        else:
            groups.setdefault(key, []).append(r)
    out = []
    for (x, scheme), rs in groups.items():
        paper = PAPER.get(rs[0]["figure"], {}).get(x, {}).get(scheme)
        gaps = [r["gap"] for r in rs if r["gap"] is not None]
        out.append(
            {
                "x": x,
                "ps": rs[0]["ps"],
                "scheme": scheme,
                "instances": len(rs),
                "throughput_mean": statistics.fmean(r["throughput_gbps"] for r in rs),
                "solve_median_s": statistics.median(r["solve_seconds"] for r in rs),
                "gap_max": max(gaps) if gaps else None,
                "optimal": sum(r["status"] == "optimal" for r in rs),
                "consistent": sum(r["consistent"] for r in rs),
                "paper": paper,
                "errors": errors.get((x, scheme), 0),
            }
        )
    return out


def _save(out: Path, rows: list[dict[str, Any]], summary: list | None = None) -> None:
    data = {
        "paper": PAPER.get(rows[0]["figure"], {}),
        "instances": rows,
        "summary": summary or summarize(rows),
    }
    (out / "eina.json").write_text(json.dumps(data, indent=2) + "\n")


def _print(summary: list[dict[str, Any]], x_label: str) -> None:
    table = Table(title=f"EINA: total throughput (Gbps) vs {x_label}")
    for col in ("x", "scheme", "n", "Gbps", "paper", "t med", "gap", "opt", "ok"):
        table.add_column(col, no_wrap=True)
    for s in summary:
        n = str(s["instances"]) + (f" +{s['errors']} failed" if s["errors"] else "")
        table.add_row(
            s["x"],
            s["scheme"],
            n,
            f"{s['throughput_mean']:.2f}",
            "-" if s["paper"] is None else f"{s['paper']:.2f}",
            f"{s['solve_median_s']:.1f}s",
            "-" if s["gap_max"] is None else f"{100 * s['gap_max']:.1f}%",
            str(s["optimal"]),
            str(s["consistent"]),
        )
    print_table(console, table)


def _plot(
    out: Path, summary: list[dict[str, Any]], figure: str, x_label: str, aggregates: str
) -> None:
    """Mean throughput per scheme against the figure's x (the paper's stated points as
    stars) and, beside it, the median solve time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(dict.fromkeys(s["x"] for s in summary))
    pos = {x: i for i, x in enumerate(xs)}
    fig, (ax, ax_t) = plt.subplots(1, 2, figsize=(12, 4))
    for scheme in dict.fromkeys(s["scheme"] for s in summary):
        pts = [
            (pos[s["x"]], s["throughput_mean"], s["solve_median_s"])
            for s in summary
            if s["scheme"] == scheme
        ]
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=scheme)
        ax_t.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=scheme)
        paper = [
            (pos[x], v[scheme])
            for x, v in PAPER.get(figure, {}).items()
            if scheme in v and x in pos
        ]
        if paper:
            ax.scatter(
                *zip(*paper, strict=True),
                marker="*",
                s=120,
                color=line.get_color(),
                edgecolor="black",
                zorder=3,
            )
    for a in (ax, ax_t):
        a.set_xticks(range(len(xs)), xs)
        a.set_xlabel(x_label)
        a.legend(fontsize=8)
    ax.set_ylabel("total aggregation throughput (Gbps)")
    ax.set_title(f"EINA Fig. {figure}, aggregates: {aggregates} (stars: paper)")
    ax_t.set_ylabel("median solve time (s)")
    ax_t.set_yscale("log")
    fig.tight_layout()
    fig.savefig(out / "eina.png", dpi=120)
    plt.close(fig)
