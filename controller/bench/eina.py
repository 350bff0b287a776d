"""`ina bench eina`: EINA Fig. 2a, total aggregation throughput against the number of PSs.

Setting (Sec. IV-A): `ina topo gen edge` clusters of 12 aggregators with 5-10 workers each and
aggregation, DCN ingress and egress capacities drawn from 200-300 Gbps, PS p at aggregator p,
every PS with all workers (EINA shards the model). Every scheme's plan is scored by the
evaluator on EINA's terms (`aggregates: all`); throughput is Σ_p r_p as the evaluator finds it.
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
SCHEMES = ["eina", "eina-iqcp", "grid", "atp", "rr"]
# Fig. 2a values the text states (Sec. IV-B), Gbps, by PS count.
PAPER = {1: {"eina": 20.3, "grid": 5.88, "atp": 9.9, "rr": 16.72},
         5: {"eina": 19.90, "grid": 25.32, "atp": 19.90, "rr": 17.23}}


def add_parser(bench: argparse._SubParsersAction) -> None:
    p = bench.add_parser("eina", help="EINA Fig. 2a: throughput vs number of PSs")
    p.add_argument("--ps", default="1,2,3,4,5", help="PS counts (default: %(default)s)")
    p.add_argument("--aggregators", type=int, default=12)
    p.add_argument("--seeds", type=int, default=5, help="instances per point (default 5)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--schemes", default=",".join(SCHEMES), help="default: %(default)s")
    p.add_argument("--time-limit", type=float, default=30.0, help="per solve (s)")
    p.add_argument("--out", default="out/bench/eina", help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for ps in (int(x) for x in args.ps.split(",") if x):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            doc = edge(aggregators=args.aggregators, ps=ps, seed=seed)
            network = build_network(doc, source=f"edge ps={ps} seed={seed}")
            for scheme in (s for s in args.schemes.split(",") if s):
                rows.append(_instance(network, ps, seed, scheme, args.time_limit))
                console.print(f"ps {ps} seed {seed} {scheme}: "
                              f"{rows[-1]['throughput_gbps']:.2f} Gbps ({rows[-1]['status']})")
                _save(out, rows)
    summary = summarize(rows)
    _save(out, rows, summary)
    _print(summary)
    _plot(out, summary)
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
             "paper": PAPER.get(ps, {}).get(scheme)}
            for (ps, scheme), rs in groups.items()]


def _save(out: Path, rows: list[dict[str, Any]], summary: list | None = None) -> None:
    data = {"figure": "EINA Fig. 2a", "paper": PAPER, "instances": rows,
            "summary": summary or summarize(rows)}
    (out / "eina.json").write_text(json.dumps(data, indent=2) + "\n")


def _print(summary: list[dict[str, Any]]) -> None:
    table = Table(title="EINA Fig. 2a: total throughput (Gbps) vs PSs")
    for col in ("PSs", "scheme", "n", "throughput", "paper", "t median", "optimal",
                "consistent"):
        table.add_column(col)
    for s in summary:
        table.add_row(str(s["ps"]), s["scheme"], str(s["instances"]),
                      f"{s['throughput_mean']:.2f}", "-" if s["paper"] is None else
                      f"{s['paper']:.2f}", f"{s['solve_median_s']:.2f}s", str(s["optimal"]),
                      str(s["consistent"]))
    console.print(table)


def _plot(out: Path, summary: list[dict[str, Any]]) -> None:
    """Mean throughput per scheme against the PS count; the paper's stated points as stars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for scheme in dict.fromkeys(s["scheme"] for s in summary):
        pts = sorted((s["ps"], s["throughput_mean"]) for s in summary if s["scheme"] == scheme)
        (line,) = ax.plot(*zip(*pts), marker="o", label=scheme)
        paper = [(ps, v[scheme]) for ps, v in PAPER.items() if scheme in v]
        if paper:
            ax.scatter(*zip(*paper), marker="*", s=120, color=line.get_color(),
                       edgecolor="black", zorder=3)
    ax.set_xlabel("number of PSs")
    ax.set_ylabel("total aggregation throughput (Gbps)")
    ax.set_title("EINA Fig. 2a (stars: paper)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "eina.png", dpi=120)
    plt.close(fig)
