"""`ina bench paring`: PARING Sec. V (Figs. 2-19) on the fat-tree k = 6, and the empirical
approximation ratio of `paring` against `paring-opt` (Theorem 2: rate ≥ 2/3 of the optimum).

Setting (Sec. V-C-1): fat-tree k = 6 (9 cores, 18 aggregation, 18 edge switches, 54 servers),
links 10 Gbps, programmable switches and the PS aggregate 10 Gbps, gradient 1627 MB (LSTM).
The first six programmable switches are edge switches, the others aggregation switches, in
declaration order (pod 0 first). DeepSys's placement, the input of the baselines, fills racks
in order from the PS (first server of pod 0). Every plan is scored by the evaluator: rate,
traffic volume (GB per iteration, aggregation direction), communication time = b / rate.

Three sweeps: workers 5-35 (8 switches, R 5), programmable switches 2-12 (20 workers, R 5),
R 0.4-6 Gbps (20 workers, 8 switches). Every scheme runs in the coarse mode (Figs. 11-19: a
switch merges all the flows it takes, or none) but `paring-fine`, PARING's tree in the fine
mode (Figs. 2-10: a switch at capacity merges a share of the fragments and forwards the rest,
`controller.solvers.partial`; deployable, `controller.compiler.segments`). The baselines' fine mode
is not run. One deterministic instance per point (the paper states no seed count).

Beside the sweeps, at the two points where the paper states PARING's 5.0 Gbps: the model
sharded over 1-3 PSs (`--pss`, Sec. IV-C.3; pss.json / pss.png) and problem (1) as printed,
where workers aggregate too (`--paper-model`; paper_model.json). `--p4` makes the programmable
switches P4 switches (B_v = ∞, Sec. IV-C.5); `--layout spread` picks them one per pod
(see fat_tree_doc). A `--schemes` entry may carry its scheme's parameters
(`deepsys-soar:k=2`), and `--paper-search` looks for the coarse plans that give the paper's
DeepSys+SOAR and PANAMA values (`paring_search`).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.solvers import SchemeInputError, SolveOptions, solve
from controller.tools.tables import print_table

console = Console()
GRADIENT_MB = 1627.0
SCHEMES = "paring,paring-fine,paring-opt,deepsys,deepsys-atp,deepsys-soar,marina,panama"
SWEEPS: dict[str, dict[str, Any]] = {
    # name → the swept field, its default values, and the fixed others
    "workers": {"values": "5,10,15,20,25,30,35", "fixed": {"switches": 8, "rate": 5.0}},
    "switches": {"values": "2,4,6,8,10,12", "fixed": {"workers": 20, "rate": 5.0}},
    "rate": {"values": "0.4,1,2,3,4,5,6", "fixed": {"workers": 20, "switches": 8}},
}
# Values the text states for the coarse mode (Sec. V-C-3); GB and Gbps.
PAPER: dict[tuple[str, float], dict[str, dict[str, float]]] = {
    ("workers", 15): {
        "rate": {
            "paring": 5.0,
            "deepsys-soar": 1.4,
            "deepsys-atp": 0.8,
            "deepsys": 0.7,
            "marina": 1.4,
            "panama": 0.9,
        },
        "volume": {
            "paring": 57.2,
            "deepsys-soar": 60.4,
            "deepsys-atp": 76.3,
            "deepsys": 111.2,
            "marina": 47.7,
            "panama": 58.8,
        },
    },
    ("switches", 12): {
        "rate": {"paring": 5.0},
        "volume": {
            "paring": 76.3,
            "deepsys-soar": 65.1,
            "deepsys-atp": 103.3,
            "deepsys": 158.9,
            "marina": 71.5,
            "panama": 60.4,
        },
    },
}


def fat_tree_doc(
    workers: int,
    switches: int,
    rate: float,
    k: int = 6,
    capacity: float = 10.0,
    p4: bool = False,
    layout: str = "pods",
) -> dict:
    """The Sec. V fat-tree with DeepSys's placement listed and `placement: free`; `p4`: the
    programmable switches are P4 switches, B_v = ∞ (Sec. IV-C.5: no aggregation capacity).
    `layout` reads "the first six ... edge switches, the remaining aggregation switches":
    `pods`, in declaration order (pod 0's, then pod 1's: one above every DeepSys rack);
    `spread`, the first edge switch of each pod, then of each pod the second aggregation
    switch (off DeepSys's routes, which take the first): the layout that reproduces the
    paper's DeepSys+ATP, MARINA and DeepSys numbers (BENCHMARKS.md, PARING)."""
    half = k // 2
    cores = [f"C{i}" for i in range(half * half)]
    aggs = [f"A{p}_{j}" for p in range(k) for j in range(half)]
    edges = [f"E{p}_{j}" for p in range(k) for j in range(half)]
    pick_edges, pick_aggs = edges, aggs  # the declaration order stays (DeepSys routes by it)
    if layout == "spread":
        pick_edges = [f"E{p}_{j}" for j in range(half) for p in range(k)]
        pick_aggs = [f"A{p}_{j}" for j in (*range(1, half), 0) for p in range(k)]
    ina = set(pick_edges[: min(switches, 6)]) | set(pick_aggs[: max(switches - 6, 0)])
    specs = []
    for name, tier in [
        *((c, "core") for c in cores),
        *((a, "aggregation") for a in aggs),
        *((e, "edge") for e in edges),
    ]:
        spec: dict[str, Any] = {"name": name, "tier": tier}
        if name in ina:
            spec.update(ina=True, **({} if p4 else {"aggregation_capacity_gbps": capacity}))
        specs.append(spec)
    hosts = [f"H{p}_{j}_{i}" for p in range(k) for j in range(half) for i in range(half)]
    links = [{"a": h, "b": f"E{h[1:].rsplit('_', 1)[0]}", "capacity_gbps": capacity} for h in hosts]
    for p in range(k):
        for j in range(half):
            for a in range(half):
                links.append({"a": f"E{p}_{j}", "b": f"A{p}_{a}", "capacity_gbps": capacity})
        for a in range(half):
            for c in range(half):
                links.append(
                    {"a": f"A{p}_{a}", "b": cores[a * half + c], "capacity_gbps": capacity}
                )
    ps, listed = hosts[0], hosts[1 : workers + 1]  # DeepSys: racks filled in order
    roles = {ps: "ps", **dict.fromkeys(listed, "worker")}
    return {
        "name": f"paring-fat-tree-k{k}",
        "description": f"PARING Sec. V: k={k}, {workers} workers, {switches} programmable, "
        f"R={rate} Gbps",
        "hosts": [{"name": h, "role": roles.get(h, "idle")} for h in hosts],
        "switches": specs,
        "links": links,
        "jobs": [
            {
                "name": "job0",
                "tasks": [
                    {
                        "name": "t0",
                        "ps": ps,
                        "workers": listed,
                        "placement": "free",
                        "rate_cap_gbps": rate,
                        "ps_aggregation_capacity_gbps": capacity,
                    }
                ],
            }
        ],
    }


def add_parser(bench: argparse._SubParsersAction) -> None:
    p = bench.add_parser(
        "paring",
        help="PARING Figs. 2-19 (fat-tree k=6) and the approximation ratio against paring-opt",
    )
    p.add_argument(
        "--sweep",
        choices=[*sorted(SWEEPS), "none"],
        action="append",
        help="sweeps to run (default: all three; none: only the other parts)",
    )
    p.add_argument("--values", help="comma-separated values of a single --sweep")
    p.add_argument(
        "--schemes",
        default=SCHEMES,
        help="comma-separated; an entry may carry its scheme's parameters, "
        "NAME:KEY=VALUE[:KEY=VALUE] (e.g. deepsys-soar:k=2), as a row of its own",
    )
    p.add_argument("--time-limit", type=float, default=30.0, help="paring-opt, per solve (s)")
    p.add_argument(
        "--ratio-instances",
        type=int,
        default=30,
        help="random small instances for the approximation ratio (0: skip)",
    )
    p.add_argument(
        "--pss", default="1,2,3", help="PS counts for the several-PS points (Sec. IV-C.3; '' skips)"
    )
    p.add_argument(
        "--paper-model",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="problem (1) as printed (workers aggregate too) at the stated points",
    )
    p.add_argument(
        "--paper-search",
        action="store_true",
        help="search every coarse plan on shortest-path trees for the paper's "
        "DeepSys+SOAR and PANAMA values (paring_search; minutes)",
    )
    p.add_argument(
        "--layout",
        choices=("pods", "spread"),
        default="pods",
        help="which switches are programmable (fat_tree_doc; default pods)",
    )
    p.add_argument(
        "--p4",
        action="store_true",
        help="P4 switches: unlimited aggregation degree, B_v = ∞ (Sec. IV-C.5)",
    )
    p.add_argument("--out", default="docs/benchmarks/paring", help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    for spec in schemes:
        scheme_spec(spec)  # a bad entry stops the run before any solve
    for sweep in [s for s in args.sweep or sorted(SWEEPS) if s != "none"]:
        values = [float(v) for v in (args.values or SWEEPS[sweep]["values"]).split(",")]
        rows = run_sweep(sweep, values, schemes, args.time_limit, args.p4, args.layout)
        (out / f"{sweep}.json").write_text(json.dumps(rows, indent=2) + "\n")
        print_sweep(sweep, rows, schemes)
        plot_sweep(sweep, rows, schemes, out / f"{sweep}.png")
    counts = [int(v) for v in args.pss.split(",") if v.strip()]
    if counts:
        rows = several_ps(counts)
        (out / "pss.json").write_text(json.dumps(rows, indent=2) + "\n")
        plot_several_ps(rows, out / "pss.png")
    if args.paper_model:
        rows = paper_model(args.time_limit)
        (out / "paper_model.json").write_text(json.dumps(rows, indent=2) + "\n")
    if args.paper_search:
        rows = paper_search()
        (out / "paper_search.json").write_text(json.dumps(rows, indent=2) + "\n")
    if args.ratio_instances > 0:
        ratio = approximation_ratio(args.ratio_instances, args.time_limit)
        (out / "ratio.json").write_text(json.dumps(ratio, indent=2) + "\n")
        console.print(ratio["summary"])
    console.print(f"written to {out}/")
    return 0


def run_sweep(
    sweep: str,
    values: list[float],
    schemes: list[str],
    time_limit: float,
    p4: bool = False,
    layout: str = "pods",
) -> list[dict]:
    rows = []
    with Progress(console=console, transient=True) as bar:
        job = bar.add_task(f"sweep {sweep}", total=len(values) * len(schemes))
        for value in values:
            setting = {**SWEEPS[sweep]["fixed"], sweep: value}
            network = build_network(
                fat_tree_doc(
                    int(setting["workers"]),
                    int(setting["switches"]),
                    setting["rate"],
                    p4=p4,
                    layout=layout,
                )
            )
            for scheme in schemes:
                name, params = scheme_spec(scheme)
                started = time.perf_counter()
                try:
                    plan = solve(
                        network,
                        name.removesuffix("-fine"),
                        SolveOptions(
                            time_limit=time_limit, seed=0, params={**_params(name), **params}
                        ),
                    )
                except SchemeInputError as exc:  # e.g. deepsys-soar:k=-1: exit 2, one line
                    from controller.tools.arguments import UserError

                    raise UserError(f"--schemes {scheme}: {exc}") from None
                seconds = time.perf_counter() - started
                result = evaluate(network, plan, gradient_mb=GRADIENT_MB)
                te = result.tasks[0]
                rows.append(
                    {
                        "sweep": sweep,
                        "value": value,
                        **setting,
                        "p4": p4,
                        "layout": layout,
                        "scheme": scheme,
                        "rate_gbps": te.rate_gbps,
                        "volume_gb": _known(te.volume_mb) / 1000,
                        "volume_gib": _known(te.volume_mb) / 1024,  # the paper's GB (BENCHMARKS.md)
                        "communication_seconds": te.communication_seconds,
                        "status": plan.status,
                        "bound": plan.bound,
                        "consistent": result.consistent,
                        "solve_seconds": seconds,
                        "paper": None if params else _paper(sweep, value, name),
                    }
                )
                bar.advance(job)
    return rows


def _known(value: float | None) -> float:
    """A volume or time of an evaluation given the gradient size (so never None)."""
    assert value is not None
    return value


def scheme_spec(text: str) -> tuple[str, dict]:
    """`--schemes` entry NAME[:KEY=VALUE...] → the scheme and its parameters (`ina mininet
    --scheme`'s syntax with ':' between pairs, since ',' separates the entries)."""
    from controller.tools.arguments import UserError
    from controller.tools.arguments import scheme_spec as _scheme_spec

    name, _, rest = text.partition(":")
    spec = f"{name}:{rest.replace(':', ',')}" if rest else name
    try:
        return _scheme_spec(spec)
    except UserError as exc:
        why = str(exc).removeprefix(f"--scheme {spec}: ").removeprefix("--param ")
        raise UserError(f"--schemes {text}: {why}") from None


def _paper(sweep: str, value: float, scheme: str) -> dict | None:
    stated = PAPER.get((sweep, value))
    if not stated:
        return None
    found = {k: v[scheme] for k, v in stated.items() if scheme in v}
    return found or None


def print_sweep(sweep: str, rows: list[dict], schemes: list[str]) -> None:
    """One row per point and scheme, so that the table stays readable in an 80-column log."""
    table = Table(title=f"PARING bench: {sweep} sweep, coarse mode, gradient {GRADIENT_MB:g} MB")
    for col in (sweep, "scheme", "rate Gbps", "volume GB", "time s", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        status = r["status"] + ("" if r["consistent"] else " INCONSISTENT")
        table.add_row(
            f"{r['value']:g}",
            r["scheme"],
            f"{r['rate_gbps']:.4g}",
            f"{r['volume_gb']:.1f}",
            f"{r['communication_seconds']:.3g}",
            status,
        )
    print_table(console, table)


def plot_sweep(sweep: str, rows: list[dict], schemes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for key, ax, label in zip(
        ("volume_gb", "rate_gbps", "communication_seconds"),
        axes,
        ("traffic volume (GB)", "sending rate (Gbps)", "communication time (s)"),
        strict=True,
    ):
        for s in schemes:
            pts = [(r["value"], r[key]) for r in rows if r["scheme"] == s]
            ax.plot(*zip(*pts, strict=True), marker="o", label=s)
        ax.set_xlabel(
            {"workers": "workers", "switches": "programmable switches", "rate": "R (Gbps)"}[sweep]
        )
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"PARING fat-tree k=6, {sweep} sweep (coarse mode; paring-fine: fine mode)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


POINTS = ((15, 8), (20, 12))  # (workers, switches) where the paper states PARING's 5.0 Gbps


def several_ps(counts: list[int]) -> list[dict]:
    """Sec. IV-C.3 at the stated points (R 5): the job's model over 1, 2, 3 PSs (`paring`). The
    paper gives no number for it; the single-PS rows are the 5.0 Gbps points."""
    rows = []
    table = Table(title="PARING with several PSs (Sec. IV-C.3), k = 6, R 5 Gbps, coarse")
    for col in (
        "workers",
        "switches",
        "PSs",
        "rates Gbps",
        "sum Gbps",
        "volume GB",
        "time s",
        "consistent",
    ):
        table.add_column(col, overflow="fold")
    for workers, switches in POINTS:
        for count in counts:
            doc = fat_tree_doc(workers, switches, 5.0)
            task = doc["jobs"][0]["tasks"][0]
            doc["jobs"][0]["tasks"] = [{**task, "name": f"t{p}"} for p in range(count)]
            network = build_network(doc)
            plan = solve(
                network, "paring", SolveOptions(seed=0, params={"gradient_gb": GRADIENT_MB / 1000})
            )
            result = evaluate(network, plan, gradient_mb=GRADIENT_MB)
            rates = [te.rate_gbps for te in result.tasks]
            volume = sum(_known(te.volume_mb) for te in result.tasks) / 1000
            seconds = max(_known(te.communication_seconds) for te in result.tasks)
            rows.append(
                {
                    "workers": workers,
                    "switches": switches,
                    "pss": count,
                    "rates_gbps": rates,
                    "rate_gbps": sum(rates),
                    "volume_gb": volume,
                    "communication_seconds": seconds,
                    "consistent": result.consistent,
                    "paper_single_ps_rate_gbps": 5.0,
                }
            )
            table.add_row(
                str(workers),
                str(switches),
                str(count),
                " + ".join(f"{r:.4g}" for r in rates),
                f"{sum(rates):.4g}",
                f"{volume:.1f}",
                f"{seconds:.3g}",
                str(result.consistent),
            )
    print_table(console, table)
    return rows


def plot_several_ps(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for workers, switches in POINTS:
        pts = [r for r in rows if (r["workers"], r["switches"]) == (workers, switches)]
        label = f"{workers} workers, {switches} switches"
        axes[0].plot(
            [r["pss"] for r in pts], [r["rate_gbps"] for r in pts], marker="o", label=label
        )
        axes[1].plot(
            [r["pss"] for r in pts], [r["volume_gb"] for r in pts], marker="o", label=label
        )
    axes[0].axhline(5.0, color="grey", ls="--", label="paper: PARING, one PS (5.0)")
    axes[0].set_ylabel("sum of the shards' rates (Gbps)")
    axes[1].set_ylabel("traffic volume (GB)")
    for ax in axes:
        ax.set_xticks(sorted({r["pss"] for r in rows}))
        ax.set_xlabel("PSs")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("PARING with several PSs (Sec. IV-C.3), fat-tree k=6, R 5 Gbps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def paper_model(time_limit: float) -> list[dict]:
    """Problem (1) as printed, where a server chosen as worker aggregates with B_v = 10 Gbps
    (`exact.solve(servers_aggregate=True)`), against ours (hosts never forward), at the
    points where the paper states 5.0 Gbps. Its witness at r = 5: two chains of workers into
    the PS (degree ⌊10/5⌋ = 2 each), given to CP-SAT as its start (ours: PARING's tree)."""
    from controller.solvers.paring import exact
    from controller.solvers.paring.alg2 import run_paring
    from controller.solvers.paring.logical import convert

    rows = []
    for workers, switches in POINTS:
        network = build_network(fat_tree_doc(workers, switches, 5.0))
        g = convert(network, network.tasks[0])
        ps = g.hosts[0]
        chain = sorted((h for h in g.hosts if h != ps), key=lambda h: g.c(ps, h))[:workers]
        parent = {w: (chain[i - 2] if i >= 2 else ps) for i, w in enumerate(chain)}
        row: dict[str, Any] = {
            "workers": workers,
            "switches": switches,
            "paper_rate_gbps": 5.0,
            "chains_volume_gb": sum(g.c(w, parent[w]) for w in chain) * GRADIENT_MB / 1000,
        }
        ours = run_paring(network, network.tasks[0])
        for servers in (False, True):  # CP-SAT starts from PARING's tree / the chains
            hint = (
                (ps, parent, chain, Fraction(5))
                if servers
                else (ours.tree.ps, ours.tree.parent, ours.tree.workers, ours.rate)
            )
            found = exact.solve(
                g, workers, time.perf_counter() + time_limit, 1, 0, hint, servers_aggregate=servers
            )
            key = "paper_model" if servers else "hosts_never_forward"
            row[key] = {
                "rate_gbps": float(found.rate),
                "cp_sat_status": found.cp_status,
                "volume_gb": None if found.cost is None else found.cost * GRADIENT_MB / 1000,
                "volume_bound_gb": None
                if found.cost_bound is None
                else found.cost_bound * GRADIENT_MB / 1000,
            }
        rows.append(row)
        console.print(
            f"problem (1) at {workers} workers, {switches} switches, R 5: "
            f"hosts never forward {row['hosts_never_forward']['rate_gbps']:.4g} Gbps; "
            f"as printed (workers aggregate) {row['paper_model']['rate_gbps']:.4g} "
            f"Gbps (the chains reach R: {row['chains_volume_gb']:.1f} GB; CP-SAT "
            f"{row['paper_model']['cp_sat_status']}); the paper: 5.0"
        )
    return rows


def paper_search() -> list[dict]:
    """`paring_search` at the stated points, both layouts: which coarse plans give the paper's
    DeepSys+SOAR and PANAMA rate and volume (docs/benchmarks/journal.md, PARING)."""
    from controller.tools.bench.paring_search import run_search

    rows = run_search(lambda w, s, layout: fat_tree_doc(w, s, 5.0, layout=layout))
    table = Table(title="coarse plans on shortest-path trees with the paper's rate and volume")
    for col in ("scheme", "point", "paper", "trees", "least", "plans", "DeepSys", "SOAR", "both"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["scheme"].removeprefix("deepsys-"),
            f"{r['workers']}/{r['switches']} {r['layout']}",
            f"{r['paper_rate_gbps']:.3g}/{r['paper_hops']}",
            str(r["trees"]),
            str(r["least_hops"]),
            str(r["matches"]),
            str(r["on_deepsys_tree"]),
            str(r["soar_optimal"]),
            str(r["soar_optimal_on_deepsys_tree"]),
        )
    console.print(
        "paper: Gbps/volume in gradient-hops (1627 MB over one link); least: the "
        "least volume of any plan; plans: those with the paper's two numbers, of "
        "which DeepSys: on DeepSys's tree, SOAR: SOAR's optimum for their budget, "
        "both: the two"
    )
    print_table(console, table)
    return rows


def small_doc(rng: random.Random) -> dict:
    """A random small instance: fat-tree k = 4 (16 servers), 3-8 programmable switches of
    1-4 Gbps, a PS of 1-4 Gbps, R of 0.5-3 Gbps, 3-7 workers."""
    doc = fat_tree_doc(
        workers=rng.randint(3, 7),
        switches=0,
        rate=rng.choice([0.5, 1.0, 2.0, 3.0]),
        k=4,
        capacity=100.0,
    )
    switches = [s for s in doc["switches"] if s["tier"] != "core" or rng.random() < 0.5]
    for s in rng.sample(switches, rng.randint(3, 8)):
        s.update(ina=True, aggregation_capacity_gbps=float(rng.randint(1, 4)))
    doc["jobs"][0]["tasks"][0]["ps_aggregation_capacity_gbps"] = float(rng.randint(1, 4))
    return doc


def approximation_ratio(instances: int, time_limit: float) -> dict:
    """PARING's rate and volume over paring-opt's, on instances paring-opt proves optimal."""
    rows = []
    with Progress(console=console, transient=True) as bar:
        job = bar.add_task("approximation ratio", total=instances)
        for seed in range(instances):
            network = build_network(small_doc(random.Random(seed)))
            heur = solve(network, "paring", SolveOptions(seed=0))
            printed = solve(network, "paring", SolveOptions(seed=0, params={"as_printed": True}))
            opt = solve(
                network,
                "paring-opt",
                SolveOptions(time_limit=time_limit, seed=0, params={"num_workers": 1}),
            )
            rows.append(
                {
                    "seed": seed,
                    "workers": len(heur.tasks[0].paths),
                    "status": opt.status,
                    "opt_rate": opt.objective,
                    "opt_volume": opt.details["traffic_volume_gradients"],
                    "paring_rate": heur.objective,
                    "paring_volume": heur.details["traffic_volume_gradients"],
                    "as_printed_rate": printed.objective,
                    "as_printed_volume": printed.details["traffic_volume_gradients"],
                    "as_printed_slack": printed.details["degree_slack"],
                }
            )
            bar.advance(job)
    proven = [r for r in rows if r["status"] == "optimal"]
    result: dict[str, Any] = {"instances": rows, "proven_optimal": len(proven)}
    lines = [
        (
            f"approximation ratio on {len(proven)} of {len(rows)} random fat-tree k=4 "
            f"instances that paring-opt proves optimal (Theorem 2 guarantees rate >= 2/3):"
        )
    ]
    for variant in ("paring", "as_printed"):
        rate = min((r[f"{variant}_rate"] / r["opt_rate"] for r in proven), default=None)
        same = [r for r in proven if abs(r[f"{variant}_rate"] - r["opt_rate"]) <= 1e-9]
        vol = max((r[f"{variant}_volume"] / r["opt_volume"] for r in same), default=None)
        mean = (
            sum(r[f"{variant}_volume"] / r["opt_volume"] for r in same) / len(same)
            if same
            else None
        )
        result[variant] = {
            "worst_rate_ratio": rate,
            "optimal_rate_instances": len(same),
            "worst_volume_ratio_at_optimal_rate": vol,
            "mean_volume_ratio_at_optimal_rate": mean,
        }
        name = "paring" if variant == "paring" else "paring as_printed=true"
        lines.append(
            f"  {name}: worst rate ratio {_g(rate)}, optimal rate on {len(same)}; "
            f"there volume ratio worst {_g(vol)}, mean {_g(mean)}"
        )
    result["summary"] = "\n".join(lines)
    return result


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _params(scheme: str) -> dict:
    """The gradient size for PARING's own report; one CP-SAT thread (2-core machine)."""
    if scheme in ("paring", "paring-fine"):  # paring-fine: Sec. V-C's fine mode
        return {"gradient_gb": GRADIENT_MB / 1000, "fine": scheme == "paring-fine"}
    if scheme == "paring-opt":
        return {"gradient_gb": GRADIENT_MB / 1000, "num_workers": 1}
    return {}
