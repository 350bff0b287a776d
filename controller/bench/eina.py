"""`ina bench eina`: EINA Fig. 2a (throughput against the number of PSs) and Fig. 3 (MIQCP
stand-in `eina` against IQCP `eina-iqcp`: throughput and solve time).

Fig. 2a (Sec. IV-A): `ina topo gen edge` clusters of 12 aggregators with 5-10 workers each and
aggregation, DCN ingress and egress capacities drawn from 200-300 Gbps, PS p at aggregator p,
every PS with all workers (EINA shards the model). Fig. 3: 50 aggregators, 10 of them without
workers, capacities 200-400 Gbps, 2 and 4 PSs. Every scheme's plan is scored by the evaluator
on EINA's terms (`aggregates: all`); throughput is Σ_p r_p as the evaluator finds it.
Instances run one after the other (2-core machine). The paper does not state its seed count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from controller.evaluate import evaluate
from controller.network import build_network
from controller.solvers import SolveOptions, solve
from controller.topogen import edge

console = Console()
# figure → default PS counts, aggregators, schemes and generator settings
FIGURES: dict[str, dict[str, Any]] = {
    "2a": {"ps": "1,2,3,4,5", "aggregators": 12, "schemes": "eina,eina-iqcp,grid,atp,rr",
           "edge": {}},
    "3": {"ps": "2,4", "aggregators": 50, "schemes": "eina,eina-iqcp",
          "edge": {"empty_aggregators": 10, "aggregation_gbps": (200.0, 400.0),
                   "ingress_gbps": (200.0, 400.0), "egress_gbps": (200.0, 400.0)}},
}
# Fig. 2a values the text states (Sec. IV-B), Gbps, by PS count.
PAPER = {1: {"eina": 20.3, "grid": 5.88, "atp": 9.9, "rr": 16.72},
         5: {"eina": 19.90, "grid": 25.32, "atp": 19.90, "rr": 17.23}}


def add_parser(bench: argparse._SubParsersAction) -> None:
    p = bench.add_parser("eina", help="EINA Fig. 2a (throughput vs PSs), Fig. 3 (MIQCP vs IQCP)")
    p.add_argument("--figure", choices=sorted(FIGURES), default="2a")
    p.add_argument("--ps", help="PS counts (default: 1,2,3,4,5 for 2a, 2,4 for 3)")
    p.add_argument("--aggregators", type=int, help="default: 12 for 2a, 50 for 3")
    p.add_argument("--seeds", type=int, default=5, help="instances per point (default 5)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--schemes", help="default: eina,eina-iqcp,grid,atp,rr for 2a, "
                   "eina,eina-iqcp for 3")
    p.add_argument("--time-limit", type=float, default=60.0, help="per solve (s)")
    p.add_argument("--out", default="out/bench/eina", help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fig = FIGURES[args.figure]
    out = Path(args.out) / f"fig{args.figure}"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for ps in (int(x) for x in (args.ps or fig["ps"]).split(",") if x):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            doc = edge(aggregators=args.aggregators or fig["aggregators"], ps=ps, seed=seed,
                       **fig["edge"])
            network = build_network(doc, source=f"edge ps={ps} seed={seed}")
            for scheme in (s for s in (args.schemes or fig["schemes"]).split(",") if s):
                rows.append({"figure": args.figure,
                             **_instance(network, ps, seed, scheme, args.time_limit)})
                console.print(f"ps {ps} seed {seed} {scheme}: "
                              f"{rows[-1]['throughput_gbps']:.2f} Gbps ({rows[-1]['status']})")
                _save(out, rows)
    summary = summarize(rows)
    _save(out, rows, summary)
    _print(summary)
    _plot(out, summary, args.figure)
    console.print(f"results in {out}/eina.json and {out}/eina.png")
    return 0


def _instance(network, ps: int, seed: int, scheme: str, limit: float) -> dict[str, Any]:
    started = time.perf_counter()
    plan = solve(network, scheme, SolveOptions(time_limit=limit, seed=seed))
    wall = time.perf_counter() - started
    result = evaluate(network, plan)
    return {"ps": ps, "seed": seed, "scheme": scheme, "status": plan.status,
            "throughput_gbps": sum(te.rate_gbps for te in result.tasks),
            "claimed_gbps": plan.objective, "bound_gbps": plan.bound, "gap": plan.gap,
            "solve_seconds": plan.solve_seconds, "wall_seconds": wall,
            "consistent": result.consistent, "problems": result.problems[:3]}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["ps"], r["scheme"]), []).append(r)
    return [{"ps": ps, "scheme": scheme, "instances": len(rs),
             "throughput_mean": statistics.fmean(r["throughput_gbps"] for r in rs),
             "solve_median_s": statistics.median(r["solve_seconds"] for r in rs),
             "optimal": sum(r["status"] == "optimal" for r in rs),
             "consistent": sum(r["consistent"] for r in rs),
             "paper": PAPER.get(ps, {}).get(scheme) if rs[0]["figure"] == "2a" else None}
            for (ps, scheme), rs in groups.items()]


def _save(out: Path, rows: list[dict[str, Any]], summary: list | None = None) -> None:
    data = {"paper_fig2a": PAPER, "instances": rows,
            "summary": summary or summarize(rows)}
    (out / "eina.json").write_text(json.dumps(data, indent=2) + "\n")


def _print(summary: list[dict[str, Any]]) -> None:
    table = Table(title="EINA: total throughput (Gbps) vs PSs")
    for col in ("PSs", "scheme", "n", "throughput", "paper", "t median", "optimal",
                "consistent"):
        table.add_column(col)
    for s in summary:
        table.add_row(str(s["ps"]), s["scheme"], str(s["instances"]),
                      f"{s['throughput_mean']:.2f}", "-" if s["paper"] is None else
                      f"{s['paper']:.2f}", f"{s['solve_median_s']:.2f}s", str(s["optimal"]),
                      str(s["consistent"]))
    console.print(table)


def _plot(out: Path, summary: list[dict[str, Any]], figure: str) -> None:
    """Mean throughput per scheme against the PS count (2a: the paper's stated points as
    stars); Fig. 3 adds the median solve time beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if figure == "3" else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    ax = axes[0][0]
    for scheme in dict.fromkeys(s["scheme"] for s in summary):
        pts = sorted((s["ps"], s["throughput_mean"]) for s in summary if s["scheme"] == scheme)
        (line,) = ax.plot(*zip(*pts), marker="o", label=scheme)
        paper = [(ps, v[scheme]) for ps, v in PAPER.items() if scheme in v]
        if paper and figure == "2a":
            ax.scatter(*zip(*paper), marker="*", s=120, color=line.get_color(),
                       edgecolor="black", zorder=3)
        if panels == 2:
            times = sorted((s["ps"], s["solve_median_s"]) for s in summary
                           if s["scheme"] == scheme)
            axes[0][1].plot(*zip(*times), marker="o", label=scheme)
    ax.set_xlabel("number of PSs")
    ax.set_ylabel("total aggregation throughput (Gbps)")
    ax.set_title(f"EINA Fig. {figure}" + (" (stars: paper)" if figure == "2a" else ""))
    ax.legend(fontsize=8)
    if panels == 2:
        axes[0][1].set_xlabel("number of PSs")
        axes[0][1].set_ylabel("median solve time (s)")
        axes[0][1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "eina.png", dpi=120)
    plt.close(fig)
