"""`ina`: the command line of the controller.

Every user-facing error (bad topology, bad plan, unknown scheme) is printed as one paragraph
and exits with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from controller.network import TopologyError, load_topology
from controller.plan import Plan, PlanFormatError, load_plan
from controller.program import CompileError
from controller.southbound.p4runtime import SouthboundError

console = Console()


class UserError(Exception):
    """An error caused by input; the message is shown as it is."""


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def print_plan(plan: Plan) -> None:
    table = Table(title=f"plan: {plan.scheme} on {plan.topology or '?'}")
    for col in ("job/task", "PS", "rate (Gbps)", "workers", "aggregation (switch:pipeline×fan-in)"):
        table.add_column(col)
    for tp in plan.tasks:
        aggs = ", ".join(f"{a.switch}:{a.pipeline}×{a.fan_in}" for a in tp.aggregation) or "none"
        table.add_row(f"{tp.job}/{tp.task}", tp.ps, _fmt(tp.rate_gbps), str(len(tp.paths)), aggs)
    console.print(table)
    gap = plan.gap
    console.print(
        f"status {plan.status}  objective {_fmt(plan.objective)}  bound {_fmt(plan.bound)}  "
        f"gap {'-' if gap is None else f'{gap:.2%}'}  time {plan.solve_seconds:.3f}s  "
        f"seed {plan.seed}"
    )


def cmd_solve(args: argparse.Namespace) -> int:
    from controller.solvers import SolveOptions, UnknownScheme, solve

    network = load_topology(args.topology)
    if not network.tasks:
        raise UserError(f"{args.topology}: the topology defines no jobs, so there is nothing to route")
    warm = _load_plan(args.warm_start) if args.warm_start else None
    params = dict(kv.split("=", 1) for kv in args.param)
    options = SolveOptions(args.time_limit, args.seed, warm, _typed(params))
    try:
        plan = solve(network, args.scheme, options)
    except UnknownScheme as exc:
        raise UserError(str(exc)) from None
    print_plan(plan)
    if args.json:
        plan.save(args.json)
        console.print(f"plan written to {args.json}")
    return 0


def _typed(params: dict[str, str]) -> dict[str, object]:
    """`--param quantization=100` arrives as text; numbers and booleans become values."""
    out: dict[str, object] = {}
    for key, text in params.items():
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def _load_plan(path: str) -> Plan:
    try:
        return load_plan(path)
    except PlanFormatError as exc:
        raise UserError(str(exc)) from None


def cmd_evaluate(args: argparse.Namespace) -> int:
    from controller.evaluate import evaluate

    network = load_topology(args.topology)
    plan = _load_plan(args.plan)
    result = evaluate(network, plan, gradient_mb=args.gradient_mb)
    table = Table(title=f"evaluation of {plan.scheme} plan on {network.name}")
    for col in ("job/task", "rate (Gbps)", "claimed (Gbps)", "flows into PS", "volume (MB)",
                "comm. time (s)"):
        table.add_column(col)
    for te in result.tasks:
        table.add_row(
            f"{te.job}/{te.task}", _fmt(te.rate_gbps), _fmt(te.claimed_rate_gbps),
            str(te.flows_into_ps), _fmt(te.volume_mb), _fmt(te.communication_seconds),
        )
    console.print(table)
    for job, seconds in (result.job_communication_seconds or {}).items():
        console.print(f"job {job}: communication time {_fmt(seconds)} s (its slowest task/shard)")
    for problem in result.problems:
        console.print(f"[red]inconsistent:[/red] {problem}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        console.print(f"evaluation written to {args.json}")
    return 0 if result.consistent else 1


def cmd_show(args: argparse.Namespace) -> int:
    from controller.draw import draw

    network = load_topology(args.topology)
    plan = _load_plan(args.plan) if args.plan else None
    draw(network, plan, args.png)
    console.print(f"picture written to {args.png}")
    return 0


def cmd_controller(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from controller import daemon
    from controller.solvers import SolveOptions, UnknownScheme, solve

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    network = load_topology(args.topology)
    try:
        targets = daemon.load_targets(args.switches)
    except daemon.SwitchesFileError as exc:
        raise UserError(str(exc)) from None
    if args.plan:
        plan = _load_plan(args.plan)
    else:
        try:
            plan = solve(network, args.scheme, SolveOptions(args.time_limit, args.seed))
        except UnknownScheme as exc:
            raise UserError(str(exc)) from None
    print_plan(plan)
    session = daemon.Session(network, plan, targets,
                             Path(args.state), p4blob=Path(args.p4blob) if args.p4blob else None,
                             p4info=Path(args.p4info) if args.p4info else None,
                             openflow_state=Path(args.openflow_state) if args.openflow_state
                             else None)
    try:
        asyncio.run(daemon.run(session, connect_timeout=args.connect_timeout, once=args.once))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    try:
        state = json.loads(Path(args.state).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{args.state}: no controller state to show ({exc})") from None
    plan = Plan.from_dict(state["plan"])
    console.print(f"topology {state['topology']}  plan v{state['version']} ({plan.scheme})")
    print_plan(plan)
    table = Table(title="switches")
    for col in ("switch", "address", "programmed", "last push (s)", "aggregations",
                "collisions", "duplicates", "malformed", "unknown job"):
        table.add_column(col)
    for name, sw in sorted(state["switches"].items()):
        counters = sw.get("counters", {})
        table.add_row(
            name, sw["address"], "yes" if sw["programmed"] else "no",
            _fmt(sw["pushes_seconds"][-1] if sw["pushes_seconds"] else None, 3),
            *(str(sum(counters.get(c, []))) for c in
              ("aggregations_completed", "collisions", "duplicates", "malformed", "unknown_job")),
        )
    console.print(table)
    if state.get("dead_links"):
        console.print("dead links: " + ", ".join("–".join(e) for e in state["dead_links"]))
    for failure in state.get("replan_failures", [])[-3:]:
        console.print(f"[red]re-plan failed[/red] around {failure['dead_links']}: "
                      f"{failure['error']} (plan v{state['version']} kept)")
    if state.get("topology_problem"):
        console.print(f"[red]topology file not usable[/red] ({state['topology_problem']['error']});"
                      f" plan v{state['version']} kept", soft_wrap=True, highlight=False)
    stopped = state.get("controller", {}).get("stopped")
    if stopped:
        console.print(f"controller stopped ({stopped['reason']}) at "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stopped['at']))}: "
                      "the switches are shown as last seen")
    return 0


def cmd_mininet(args: argparse.Namespace) -> int:
    from controller import mininet_runner as runner
    from controller.solvers import SolveOptions, UnknownScheme, solve

    network = load_topology(args.topology)
    console.print(f"link scale: 1 model Gbps = {args.scale_mbps:g} Mbps of TCLink bandwidth")
    results = []
    for scheme in args.scheme or ["shortest"]:
        try:
            plan = solve(network, scheme, SolveOptions(args.time_limit, args.seed))
        except UnknownScheme as exc:
            raise UserError(str(exc)) from None
        print_plan(plan)
        planned = plan.tasks[0].rate_gbps * args.scale_mbps

        def show(it: runner.IterationResult, planned: float = planned) -> None:
            goodput = ", ".join(f"{w} {g:.2f}" for w, g in sorted(it.goodput_mbps.items()))
            console.print(
                f"iteration {it.iteration}: {it.seconds:.2f} s, result "
                f"{'exact' if it.exact else '[red]WRONG[/red]'}, flows into the PS "
                f"{it.ps_link_flows:g}, payload goodput Mbps (plan {planned:.2f} on the wire): "
                f"{goodput}", highlight=False)

        try:
            results.append(runner.run(
                network, plan, iterations=args.iterations, gradient_mb=args.gradient_mb,
                target=args.target, scale_mbps=args.scale_mbps, timeout=args.timeout,
                on_iteration=show, plain_switches=args.plain_switches))
        except runner.RunnerError as exc:
            console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
            return 1
    _print_runs(results)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    return 0 if all(r.exact for r in results) else 1


def _print_runs(results: list) -> None:
    table = Table(title="closed loop on Mininet")
    for col in ("scheme", "plan rate (Gbps)", "iterations", "mean iteration (s)",
                "flows into PS", "results"):
        table.add_column(col)
    for r in results:
        flows = sorted({it.ps_link_flows for it in r.iterations})
        table.add_row(r.scheme, _fmt(r.plan_rate_gbps), str(len(r.iterations)),
                      f"{r.mean_seconds:.2f}", ", ".join(f"{f:g}" for f in flows),
                      "exact" if r.exact else "WRONG")
    console.print(table)
    if len(results) >= 2 and results[-1].mean_seconds > 0:
        ratio = results[0].mean_seconds / results[-1].mean_seconds
        console.print(f"iteration-time ratio {results[0].scheme}/{results[-1].scheme}: "
                      f"{ratio:.2f} (the plans' rates say "
                      f"{results[-1].plan_rate_gbps / results[0].plan_rate_gbps:.2f})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ina", description="Controller for in-network aggregation: plan, push, verify."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("solve", help="compute a routing plan for a topology's jobs")
    p.add_argument("topology", help="topology YAML file")
    p.add_argument("--scheme", default="shortest", help="routing scheme (default: shortest)")
    p.add_argument("--json", metavar="OUT", help="write the plan as JSON")
    p.add_argument("--time-limit", type=float, metavar="S", help="solver time limit in seconds")
    p.add_argument("--seed", type=int, default=0, help="seed for randomised schemes (default 0)")
    p.add_argument("--warm-start", metavar="PLAN.json", help="previous plan to start from")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="scheme parameter, repeatable (e.g. quantization=100)")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("evaluate", help="score a plan independently of the scheme that made it")
    p.add_argument("topology")
    p.add_argument("plan")
    p.add_argument("--gradient-mb", type=float, default=100.0,
                   help="gradient size per worker for volume and time (default 100 MB)")
    p.add_argument("--json", metavar="OUT", help="write the evaluation as JSON")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("show", help="draw a topology and optionally a plan")
    p.add_argument("topology")
    p.add_argument("--plan", metavar="PLAN.json")
    p.add_argument("--png", required=True, metavar="OUT.png")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("controller", help="solve, push the plan to the switches, keep them so")
    p.add_argument("topology")
    p.add_argument("--scheme", default="shortest")
    p.add_argument("--plan", metavar="PLAN.json", help="install this plan instead of solving")
    p.add_argument("--switches", required=True, metavar="FILE.json",
                   help='P4Runtime addresses: {"S1": {"address": "HOST:PORT", "device_id": 1}}')
    p.add_argument("--state", default="out/controller/state.json",
                   help="state file published to host agents and `ina status`")
    p.add_argument("--p4blob", metavar="FILE", help="device config (bmv2 JSON from p4c)")
    p.add_argument("--p4info", metavar="FILE",
                   help="P4Info text file (default p4src/ina.p4info.txtpb; p4c's for bmv2)")
    p.add_argument("--time-limit", type=float, metavar="S")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--connect-timeout", type=float, default=15.0, metavar="S")
    p.add_argument("--once", action="store_true", help="exit once every switch is programmed")
    p.add_argument("--openflow-state", metavar="FILE",
                   help="the OpenFlow controller's state file (plain switches on Open vSwitch "
                        "following this daemon): publish a new plan version to the hosts only "
                        "once they hold it")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    p.set_defaults(func=cmd_controller)

    p = sub.add_parser("mininet", help="run the closed loop on Mininet with real packets (root)")
    p.add_argument("topology")
    p.add_argument("--scheme", action="append",
                   help="routing scheme; repeat to compare schemes side by side (default shortest)")
    p.add_argument("--gradient-mb", type=float, default=1.0)
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--target", choices=["embedded", "bmv2"], default="embedded")
    p.add_argument("--plain-switches", choices=["p4", "ovs"], default="p4",
                   help="non-INA switches as the P4 target without aggregation (default) or "
                        "as Open vSwitch under an OpenFlow 1.3 controller (os-ken)")
    p.add_argument("--scale-mbps", type=float, default=2.0,
                   help="TCLink Mbps per model Gbps (default 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="per-iteration limit (s)")
    p.add_argument("--time-limit", type=float, metavar="S", help="solver time limit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", help="write per-iteration results as JSON")
    p.set_defaults(func=cmd_mininet)

    p = sub.add_parser("status", help="show switches, plan version, rates and counters")
    p.add_argument("state", nargs="?", default="out/controller/state.json")
    p.set_defaults(func=cmd_status)

    for register in _plugins():
        register(sub)
    return parser


def _plugins() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommands owned by other modules (topology generators, switch target, benchmarks)."""
    hooks = []
    for module in ("controller.topogen", "dataplane.cli", "controller.bench"):
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        if hasattr(mod, "register"):  # a folder without __init__.py yet is not a plugin
            hooks.append(mod.register)
    return hooks


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (TopologyError, UserError) as exc:
        console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
        return 2
    except (SouthboundError, CompileError) as exc:
        console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
