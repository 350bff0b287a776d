"""`ina bench e2e`: the closed loop measured end to end on Mininet (root).

On ARO's Fig. 1 network it measures what the model promises and what recovery costs:
each worker's goodput against its plan's rate (scaled), the iteration-time ratio
shortest/aro (the plans' rates say 5), the controller's re-push after a switch restart, and
the re-plan-and-move after a link failure. It writes `e2e.json` and `e2e.png` (the PS link's
packet rate over time in each run, with the restart, the link failure and the plan change
marked). Timing lives here, never in test assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import pairwise
from pathlib import Path

from rich.console import Console
from rich.table import Table

from controller.emulation.mininet_runner import Emulation, IterationResult, missing_mininet, run
from controller.model.network import load_topology
from controller.solvers import solve
from controller.tools.tables import print_table

EXAMPLE = Path(__file__).resolve().parents[3] / "topologies" / "examples" / "aro-fig1.yaml"
console = Console()


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("e2e", help="closed loop on Mininet: goodput, shortest/aro, recovery")
    p.add_argument(
        "--topology",
        default=str(EXAMPLE),
        help="topology YAML file to emulate (default ARO Fig. 1)",
    )
    p.add_argument(
        "--gradient-mb",
        type=float,
        default=0.25,
        help="gradient size each worker sends per iteration, in MB (default 0.25)",
    )
    p.add_argument("--iterations", type=int, default=3, help="iterations per scheme (default 3)")
    p.add_argument(
        "--scale-mbps", type=float, default=2.0, help="TCLink Mbps per model Gbps (default 2)"
    )
    p.add_argument(
        "--out", default="out/bench/e2e", help="output directory (default out/bench/e2e)"
    )
    p.add_argument("--fail-link", default="L1,S1", help="link cut in the failure run (A,B)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if reason := missing_mininet():
        print(f"error: ina bench e2e: {reason}", file=sys.stderr)
        return 2
    network = load_topology(args.topology)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plans = {scheme: solve(network, scheme) for scheme in ("shortest", "aro")}
    report: dict = {
        "topology": network.name,
        "scale_mbps_per_gbps": args.scale_mbps,
        "gradient_mb": args.gradient_mb,
        "runs": {},
    }
    for scheme, plan in plans.items():
        console.print(f"[bold]{scheme}[/bold]: {args.iterations} iteration(s)")
        result = run(
            network,
            plan,
            iterations=args.iterations,
            gradient_mb=args.gradient_mb,
            scale_mbps=args.scale_mbps,
        )
        report["runs"][scheme] = result.to_dict()
    shortest, aro = (report["runs"][s] for s in ("shortest", "aro"))
    report["iteration_time_ratio"] = _mean_seconds(shortest) / _mean_seconds(aro)
    console.print("[bold]restart[/bold]: S1 killed and restarted mid-iteration")
    report["restart"] = _restart_run(network, plans["aro"], args)
    console.print(f"[bold]link failure[/bold]: {args.fail_link} cut mid-iteration")
    report["link_failure"] = _link_failure_run(network, plans["aro"], args)
    (out / "e2e.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, out / "e2e.png")
    _print(report)
    console.print(f"results in {out / 'e2e.json'} and {out / 'e2e.png'}")
    return 0


def _mean_seconds(run_dict: dict) -> float:
    its = run_dict["iterations"]
    return sum(it["seconds"] for it in its) / len(its)


def _restart_run(network, plan, args) -> dict:
    events: dict = {}
    with Emulation(network, plan, scale_mbps=args.scale_mbps) as emu:

        def restart() -> None:  # runs as the workers start: its clock matches the samples'
            t0 = time.monotonic()
            emu.wait_for_traffic()
            events["restart_at"] = time.monotonic() - t0
            restarted = emu.restart_switch("S1")
            events["boot_seconds"] = restarted.boot_seconds
            events["repush_seconds"] = restarted.repush_seconds

        (it,) = emu.iterate(args.gradient_mb, 1, timeout=120, during=restart)
        events["write_seconds"] = emu.state()["switches"]["S1"]["pushes_seconds"][-1]
    return {**events, "iteration": _it(it)}


def _link_failure_run(network, plan, args) -> dict:
    a, b = args.fail_link.split(",")
    events: dict = {"link": [a, b]}
    with Emulation(network, plan, scale_mbps=args.scale_mbps) as emu:

        def cut() -> None:
            t0 = time.monotonic()
            emu.wait_for_traffic()
            events["cut_at"] = time.monotonic() - t0
            emu.set_link(a, b, up=False)
            cut_time = time.monotonic()
            while time.monotonic() - cut_time < 30:
                state = emu.state()
                if state["version"] > 1:
                    events["new_plan_seconds"] = time.monotonic() - cut_time
                    return
                time.sleep(0.05)
            events["new_plan_seconds"] = None  # the controller never re-planned

        try:
            (it,) = emu.iterate(args.gradient_mb, 1, timeout=60, during=cut)
            events["iteration"] = _it(it)
        except RuntimeError as exc:
            events["error"] = str(exc)
        # The daemon records a re-plan once its drain is over: read it at the end.
        events["replans"] = emu.state()["replans"]
    return events


def _it(it: IterationResult) -> dict:
    return {
        "seconds": it.seconds,
        "exact": it.exact,
        "ps_link_flows": it.ps_link_flows,
        "goodput_mbps": it.goodput_mbps,
        "samples": it.ps_link_samples,
    }


def _rate(samples: list) -> tuple[list[float], list[float]]:
    """Packets per second into the PS between consecutive samples."""
    times, rates = [], []
    for (t0, n0), (t1, n1) in pairwise(samples):
        if t1 > t0:
            times.append(t1)
            rates.append((n1 - n0) / (t1 - t0))
    return times, rates


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    for scheme, colour in (("shortest", "tab:red"), ("aro", "tab:green")):
        samples = report["runs"][scheme]["iterations"][0]["ps_link_samples"]
        axes[0].plot(*_rate(samples), color=colour, label=scheme)
    axes[0].set_title("iteration 1: packets/s into the PS")
    axes[0].legend()
    restart = report["restart"]
    axes[1].plot(*_rate(restart["iteration"]["samples"]), color="tab:green")
    axes[1].axvline(restart["restart_at"], color="k", linestyle="--", label="S1 restarted")
    axes[1].axvline(
        restart["restart_at"] + restart["boot_seconds"] + restart["repush_seconds"],
        color="tab:blue",
        linestyle=":",
        label="S1 re-programmed",
    )
    axes[1].set_title("aro, switch restart")
    axes[1].legend()
    failure = report["link_failure"]
    if "iteration" in failure:
        axes[2].plot(*_rate(failure["iteration"]["samples"]), color="tab:green")
    axes[2].axvline(failure["cut_at"], color="k", linestyle="--", label="link cut")
    if failure.get("new_plan_seconds") is not None:
        axes[2].axvline(
            failure["cut_at"] + failure["new_plan_seconds"],
            color="tab:blue",
            linestyle=":",
            label="plan v2 published",
        )
    axes[2].set_title(f"aro, link {'-'.join(failure['link'])} cut")
    axes[2].legend()
    for ax in axes:
        ax.set_xlabel("seconds since the workers started")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _print(report: dict) -> None:
    table = Table(title="closed loop on Mininet (ARO Fig. 1)")
    table.add_column("measure")
    table.add_column("value")
    for scheme in ("shortest", "aro"):
        r = report["runs"][scheme]
        table.add_row(f"{scheme}: mean iteration (s)", f"{_mean_seconds(r):.2f}")
        goodputs = [g for it in r["iterations"] for g in it["goodput_mbps"].values()]
        planned = r["plan_rate_gbps"] * report["scale_mbps_per_gbps"]
        table.add_row(
            f"{scheme}: worker payload goodput (Mbps), plan {planned:.2f} on the wire",
            f"{min(goodputs):.2f} - {max(goodputs):.2f}",
        )
        table.add_row(f"{scheme}: results exact", str(r["exact"]))
    table.add_row(
        "iteration-time ratio shortest/aro (model: 5)", f"{report['iteration_time_ratio']:.2f}"
    )
    restart = report["restart"]
    table.add_row(
        "restart: boot / reconnect+re-push / writes (s)",
        f"{restart['boot_seconds']:.2f} / {restart['repush_seconds']:.2f} / "
        f"{restart['write_seconds']:.3f}",
    )
    table.add_row("restart: iteration exact", str(restart["iteration"]["exact"]))
    failure = report["link_failure"]
    seconds = failure.get("new_plan_seconds")
    table.add_row(
        "link failure: cut → new plan published (s)",
        "not re-planned" if seconds is None else f"{seconds:.2f}",
    )
    for replan in failure.get("replans", []):
        table.add_row(
            f"link failure: plan v{replan['version']} solve / install (s)",
            f"{replan['solve_seconds']:.2f} / {replan['install_seconds']:.3f}",
        )
    table.add_row(
        "link failure: iteration exact",
        str(failure.get("iteration", {}).get("exact", failure.get("error"))),
    )
    print_table(console, table)
