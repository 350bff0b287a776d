"""`ina`: the command line of the controller.

Every user-facing error (bad topology, bad plan, bad argument, unknown scheme) is printed as
one paragraph and exits with code 2, without a traceback. Arguments are checked before any
work starts: an output file that cannot be written fails before the solve, not after it.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import json
import os
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.table import Table

from controller.compiler.program import CompileError
from controller.model.inputs import InputError, parse_json, plain_error, read_text
from controller.model.network import Network, load_topology
from controller.model.plan import MAX_FAN_IN, Plan, parse_plan
from controller.service.job_model import DEFAULT_JOB_SLOTS, SLOT_REGION
from controller.southbound.p4runtime import SouthboundError
from controller.tools.arguments import (
    UserError,
    count,
    mark_depth,
    param_pair,
    param_values,
    positive,
    scheme_spec,
    solver_seed,
)
from controller.tools.tables import print_table
from dataplane.frame import BMV2_QUEUE_DEPTH

console = Console(soft_wrap=True)  # piped into a log, lines stay whole (tables: print_table)


def _fmt(value: float | None, digits: int = 4) -> str:
    """A number for a table or a line: `digits` significant digits, and a whole number where
    that would take an exponent (209715 MB, not 2.097e+05)."""
    if value is None:
        return "-"
    text = f"{value:.{digits}g}"
    return f"{value:.0f}" if "e+" in text else text


def _write_json(path: str, data: Any, what: str) -> None:
    """`--json OUT`: `data` as JSON into OUT, or onto stdout for `-` (the tables then went to
    stderr, see `main`)."""
    text = json.dumps(data, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    Path(path).write_text(text)
    console.print(f"{what} written to {path}")


def print_plan(plan: Plan) -> None:
    """The plan as a table; a model share and a partial merge share are shown only where set."""
    table = Table(title=f"plan: {plan.scheme} on {plan.topology or '?'}")
    shared_model = any(tp.model_share is not None for tp in plan.tasks)
    for col in (
        "job/task",
        "PS",
        "rate (Gbps)",
        *(["model share"] if shared_model else []),
        "workers",
        "aggregation (switch:pipeline×fan-in, merged share if partial)",
    ):
        table.add_column(col)
    for tp in plan.tasks:
        aggs = (
            ", ".join(
                f"{a.switch}:{a.pipeline}×{a.fan_in}"
                + ("" if a.share == 1.0 else f" {_fmt(a.share)}")
                for a in tp.aggregation
            )
            or "none"
        )
        share = [_fmt(tp.model_share)] if shared_model else []
        table.add_row(
            f"{tp.job}/{tp.task}", tp.ps, _fmt(tp.rate_gbps), *share, str(len(tp.paths)), aggs
        )
    print_table(console, table)
    gap = plan.gap
    console.print(
        f"status {plan.status}  objective {_fmt(plan.objective)}  bound {_fmt(plan.bound)}  "
        f"gap {'-' if gap is None else f'{gap:.2%}'}  time {plan.solve_seconds:.3f}s  "
        f"seed {plan.seed}"
    )
    if plan.details.get("max_fan_in") == 0:
        console.print(
            f"fan-in: unlimited (the paper's model); the data plane merges at most {MAX_FAN_IN}"
        )
    if plan.details.get("summary"):  # a scheme's own one-line result (e.g. PARING's placement)
        console.print(plan.details["summary"])


def cmd_solve(args: argparse.Namespace) -> int:
    from controller.solvers import SchemeInputError, SolveOptions, solve

    _check_writable(args.json, "--json")
    _check_writable(args.topology_out, "--topology-out")
    params = param_values(args.param)
    network = load_topology(args.topology)
    if not network.tasks:
        raise UserError(
            f"{args.topology}: the topology defines no jobs, so there is nothing to route"
        )
    warm = _load_plan(args.warm_start, "--warm-start", network) if args.warm_start else None
    options = SolveOptions(args.time_limit, args.seed, warm, params)
    try:
        with _progress(args):
            plan = solve(network, args.scheme, options)
    except SchemeInputError as exc:
        raise UserError(str(exc)) from None
    print_plan(plan)
    if args.json:
        _write_json(args.json, plan.to_dict(), "plan")
    if args.topology_out:
        _write_chosen(network, plan, args.topology_out)
    return 0


def _progress(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """Progress lines on stderr during a long solve: on a terminal unless --quiet, or when
    asked with --progress."""
    from controller.solvers import progress, scheme
    from controller.solvers.catalog import SCHEMES

    if args.quiet or not (args.progress or sys.stderr.isatty()) or args.scheme not in SCHEMES:
        return contextlib.nullcontext()
    limit = args.time_limit if args.time_limit is not None else scheme(args.scheme).time_limit
    return progress.watch(sys.stderr, args.scheme, limit, interval=args.progress_every)


def cmd_schemes(args: argparse.Namespace) -> int:
    from controller.solvers import SchemeInputError, scheme
    from controller.solvers.catalog import SCHEMES

    if args.name is None:
        for entry in SCHEMES.values():
            print(_wrapped(f"{entry.name:<13} {entry.summary}", indent=14))
        print(
            _wrapped(
                "`ina schemes NAME` gives a scheme's paper, default time limit and "
                "parameters (set with --param KEY=VALUE or in the topology's "
                "`schemes.NAME` section)."
            )
        )
        return 0
    try:
        entry = scheme(args.name)
    except SchemeInputError as exc:
        raise UserError(str(exc)) from None
    limit = "none (runs to its end)" if entry.time_limit is None else f"{entry.time_limit:g} s"
    print(_wrapped(f"{entry.name}: {entry.summary}"))
    print(_wrapped(f"paper: {entry.paper}", indent=7))
    print(f"default time limit: {limit}")
    if entry.shares:
        print(_wrapped(f"also reads the topology's `schemes.{entry.shares}` section"))
    if not entry.params:
        print("parameters: none")
    else:
        print("parameters (--param KEY=VALUE):")
    for param in entry.params:
        print(
            _wrapped(
                f"  {param.name} ({param.wanted()}, default {param.shown_default()}): "
                f"{param.meaning}",
                indent=4,
            )
        )
    return 0


def _wrapped(text: str, indent: int = 0) -> str:
    """A paragraph folded to 80 columns, continuation lines indented."""
    import textwrap

    return textwrap.fill(text, width=80, subsequent_indent=" " * indent, break_on_hyphens=False)


def _time_limits() -> str:
    """Each scheme's default time limit, for --help."""
    from controller.solvers.catalog import SCHEMES

    groups: dict[float, list[str]] = {}
    for entry in SCHEMES.values():
        if entry.time_limit is not None:
            groups.setdefault(entry.time_limit, []).append(entry.name)
    limits = "; ".join(f"{', '.join(names)}: {limit:g} s" for limit, names in groups.items())
    return f"{limits}; the others run to their end"


def _write_chosen(network, plan: Plan, path: str) -> None:
    """`--topology-out`: the network a topology-choosing scheme built
    (controller.model.patch_panel)."""
    from controller.model import patch_panel

    if plan.patch_panel is None:
        raise UserError(
            f"--topology-out: scheme {plan.scheme} routes on the topology as it is "
            f"and chooses no network; use a topology-choosing scheme (atro)"
        )
    patch_panel.write(network, plan, path)
    console.print(f"chosen topology written to {path} ({len(plan.patch_panel)} links)")


def _check_writable(path: str | None, option: str) -> None:
    """Fail now, not after a long solve, when `path` cannot be written (a directory, a
    missing or read-only place). A missing directory is an error, not created: a typo in it
    would otherwise leave the output somewhere unexpected. `-` is stdout."""
    if not path or (path == "-" and option == "--json"):
        return
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{option} {path}: is a directory; name a file")
    if not target.parent.exists():
        raise UserError(
            f"{option} {path}: the directory {target.parent} does not exist; create it first"
        )
    existed = target.exists()
    try:
        with target.open("a"):
            pass
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write there ({exc.strerror})") from None
    if not existed:
        target.unlink()


def _load_plan(path: str, option: str | None = None, network: Network | None = None) -> Plan:
    """The plan in `path`; with `network`, refused unless made for it (`_check_made_for`)."""
    try:
        plan = Plan.load(path)
    except InputError as exc:
        raise UserError(f"{option}: {exc}" if option else str(exc)) from None
    if network is not None:
        _check_made_for(plan, network, f"{option} {path}" if option else path)
    return plan


def _check_made_for(plan: Plan, network: Network, where: str) -> None:
    """A plan records the topology it was made for (the topology's `name`); on another one
    its paths name nodes that are not there, so it is refused here, naming both. A plan with a
    patch panel also runs on the network that panel built (`ina mininet` on a pool). A plan
    without the field (an older file) is left to the evaluator."""
    from controller.model.patch_panel import chosen_name

    made_for = {plan.topology}
    if plan.patch_panel is not None:
        made_for.add(chosen_name(plan.topology, plan.scheme))
    if plan.topology and network.name not in made_for:
        raise UserError(
            f"{where}: the plan was made for topology {plan.topology!r}, but "
            f"{network.source} is topology {network.name!r}; solve it again on "
            f"this one (`ina solve {network.source}`)"
        )


def cmd_evaluate(args: argparse.Namespace) -> int:
    from controller.evaluator.evaluate import evaluate

    _check_writable(args.json, "--json")
    network = load_topology(args.topology)
    plan = _load_plan(args.plan, network=network)
    result = evaluate(network, plan, gradient_mb=args.gradient_mb)
    table = Table(title=f"evaluation of {plan.scheme} plan on {network.name}")
    for col in (
        "job/task",
        "rate (Gbps)",
        "claimed (Gbps)",
        "flows into PS",
        "volume (MB)",
        "comm. time (s)",
    ):
        table.add_column(col)
    for te in result.tasks:
        table.add_row(
            f"{te.job}/{te.task}",
            _fmt(te.rate_gbps),
            _fmt(te.claimed_rate_gbps),
            str(te.flows_into_ps),
            _fmt(te.volume_mb),
            _fmt(te.communication_seconds),
        )
    print_table(console, table)
    for job, seconds in (result.job_communication_seconds or {}).items():
        console.print(f"job {job}: communication time {_fmt(seconds)} s (its slowest task/shard)")
    for problem in result.problems:
        console.print(f"[red]inconsistent:[/red] {problem}")
    for limit in result.beyond_data_plane:
        console.print(f"[red]not deployable on the INA data plane:[/red] {limit}")
    if args.json:
        _write_json(args.json, result.to_dict(), "evaluation")
    return 0 if result.consistent and not result.beyond_data_plane else 1


def cmd_show(args: argparse.Namespace) -> int:
    from controller.tools.draw import draw

    _check_writable(args.png, "--png")
    network = load_topology(args.topology)
    plan = _load_plan(args.plan, "--plan", network) if args.plan else None
    if plan is not None and (unknown := _unknown_nodes(plan, network)):
        raise UserError(
            f"--plan {args.plan}: the plan's node(s) {', '.join(unknown)} are not "
            f"in {network.source}"
        )
    draw(network, plan, args.png)
    console.print(f"picture written to {args.png}")
    return 0


def _unknown_nodes(plan: Plan, network: Network) -> list[str]:
    """Nodes the plan routes through or aggregates at that the topology does not have."""
    named = {node for tp in plan.tasks for path in tp.paths.values() for node in path}
    named |= {p.switch for tp in plan.tasks for p in tp.aggregation}
    return sorted(named - set(network.graph.nodes))


def _add_channel_options(p: argparse.ArgumentParser) -> None:
    """P4Runtime channel: TLS (controller/southbound/tls.py) and the election id (failover)."""
    p.add_argument(
        "--tls-ca",
        type=Path,
        metavar="PEM",
        help="connect over TLS; accept only switch certificates signed by this CA",
    )
    p.add_argument(
        "--tls-cert",
        type=Path,
        metavar="PEM",
        help="the controller's certificate, for switches that require one",
    )
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="its private key")
    p.add_argument(
        "--tls-server-name",
        default="",
        metavar="NAME",
        help="the name the switches' certificates must carry (default: the address dialled)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain text to switches that are not on a loopback address",
    )
    p.add_argument(
        "--election-id",
        type=_election_id,
        default=10,
        metavar="N",
        help="P4Runtime election id (default 10); the live controller with the "
        "highest is primary, others wait as backups (RELIABILITY.md)",
    )


def _job_slots(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if not 1 <= value <= SLOT_REGION:
        raise argparse.ArgumentTypeError(f"expected an integer in 1..{SLOT_REGION}, got {text!r}")
    return value


def _election_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 0 < value < 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in 1..2^64-1, got {text!r}")
    return value


def _secure(args: argparse.Namespace, targets: dict) -> dict:
    from controller.southbound.tls import ClientTLS, TLSConfigError, secure_targets

    tls_only = (args.tls_cert, args.tls_key, args.tls_server_name)
    if args.tls_ca is None and any(tls_only):
        raise UserError(
            "--tls-cert, --tls-key and --tls-server-name need --tls-ca (the CA "
            "that signs the switches' certificates)"
        )
    tls = (
        ClientTLS(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
        if args.tls_ca
        else None
    )
    try:
        return secure_targets(targets, tls, args.insecure)
    except TLSConfigError as exc:
        raise UserError(str(exc)) from None


def cmd_controller(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from controller.service import daemon
    from controller.solvers import SchemeInputError, SolveOptions, solve

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    network = load_topology(args.topology)
    plan = _load_plan(args.plan, "--plan", network) if args.plan else None
    try:
        targets = daemon.load_targets(args.switches)
    except daemon.SwitchesFileError as exc:
        raise UserError(str(exc)) from None
    targets = _secure(args, targets)
    northbound: ModuleType | None = None
    layout = None
    if args.api and args.once:
        raise UserError("--api serves jobs while the controller runs; it cannot go with --once")
    if args.api:
        from controller.service import api

        northbound = api
        try:
            api_tls = api.api_tls(args.api_cert, args.api_key)
            api_socket, token, layout = api.prepare(
                args.api, args.api_token_file, network, args.job_slots
            )
        except api.ApiConfigError as exc:
            raise UserError(str(exc)) from None
    elif args.api_token_file or args.api_cert or args.api_key:
        raise UserError("--api-token-file, --api-cert and --api-key need --api HOST:PORT")
    if plan is None:
        try:
            plan = solve(network, args.scheme, SolveOptions(args.time_limit, args.seed))
        except SchemeInputError as exc:
            raise UserError(str(exc)) from None
    print_plan(plan)
    session = daemon.Session(
        network,
        plan,
        targets,
        Path(args.state),
        layout=layout,
        p4blob=Path(args.p4blob) if args.p4blob else None,
        p4info=Path(args.p4info) if args.p4info else None,
        openflow_state=Path(args.openflow_state) if args.openflow_state else None,
        election_id=args.election_id,
        switch_grace=args.switch_grace,
        watch_primary=args.watch_primary,
        primary_stale=args.primary_stale,
        mark_depth=args.mark_depth,
    )
    if northbound is not None:
        northbound.attach(
            session,
            api_socket,
            token,
            scheme=args.scheme,
            time_limit=args.time_limit,
            seed=args.seed,
            tls=api_tls,
        )
        console.print(f"API on {session.api_url} once the switches hold the plan")
    with contextlib.suppress(KeyboardInterrupt):
        probes = None if args.no_link_monitor else args.probe_interval
        asyncio.run(
            daemon.run(
                session,
                connect_timeout=args.connect_timeout,
                once=args.once,
                probe_interval=probes,
            )
        )
    return 0


class _SwitchState(BaseModel):
    model_config = ConfigDict(extra="ignore")
    address: str
    programmed: bool
    pushes_seconds: list[float] = []
    counters: dict[str, list[int]] = {}


class _ReplanFailure(BaseModel):
    model_config = ConfigDict(extra="ignore")
    dead_links: Any = None
    error: str


class _TopologyProblem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    error: str


class _Stopped(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    at: float
    reason: str


class _ControllerProcess(BaseModel):
    model_config = ConfigDict(extra="ignore")
    stopped: _Stopped | None = None


class _State(BaseModel):
    """What `ina status` reads of the controller's state file (the daemon writes more)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    version: int
    topology: str
    plan: dict[str, Any]
    switches: dict[str, _SwitchState]
    dead_links: list[list[str]] = []
    replan_failures: list[_ReplanFailure] = Field(default=[])
    topology_problem: _TopologyProblem | None = None
    controller: _ControllerProcess | None = None


def _read_state(path: str) -> tuple[_State, Plan, Any]:
    """The state file checked, its plan, and the document as written."""
    text = read_text(path)
    if not text.strip():
        raise UserError(f"{path}: the state file is empty (is a controller starting?)")
    data = parse_json(text, path)
    try:
        state = _State.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(
            f"{path} at {where}: not a controller state file: {plain_error(err)}"
        ) from None
    return state, parse_plan(state.plan, f"{path} (plan)"), data


def cmd_status(args: argparse.Namespace) -> int:
    _check_writable(args.json, "--json")
    state, plan, data = _read_state(args.state)
    if args.json:
        _write_json(args.json, data, "state")
        return 0
    console.print(f"topology {state.topology}  plan v{state.version} ({plan.scheme})")
    print_plan(plan)
    table = Table(title="switches")
    for col in (
        "switch",
        "address",
        "programmed",
        "last push (s)",
        "aggregations",
        "collisions",
        "duplicates",
        "malformed",
        "unknown job",
        "forged",
    ):
        table.add_column(col)
    for name, sw in sorted(state.switches.items()):
        table.add_row(
            name,
            sw.address,
            "yes" if sw.programmed else "no",
            _fmt(sw.pushes_seconds[-1] if sw.pushes_seconds else None, 3),
            *(
                str(sum(sw.counters.get(c, [])))
                for c in (
                    "aggregations_completed",
                    "collisions",
                    "duplicates",
                    "malformed",
                    "unknown_job",
                    "forged",
                )
            ),
        )
    print_table(console, table)
    if state.dead_links:
        console.print("dead links: " + ", ".join("–".join(e) for e in state.dead_links))
    for failure in state.replan_failures[-3:]:
        console.print(
            f"[red]re-plan failed[/red] around {failure.dead_links}: "
            f"{failure.error} (plan v{state.version} kept)"
        )
    if state.topology_problem:
        console.print(
            f"[red]topology file not usable[/red] ({state.topology_problem.error});"
            f" plan v{state.version} kept",
            soft_wrap=True,
            highlight=False,
        )
    stopped = state.controller.stopped if state.controller else None
    if stopped:
        console.print(
            f"controller stopped ({stopped.reason}) at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stopped.at))}: "
            "the switches are shown as last seen"
        )
    return 0


def cmd_mininet(args: argparse.Namespace) -> int:
    from controller.emulation import mininet_runner as runner
    from controller.solvers import SchemeInputError, SolveOptions, solve

    if reason := runner.missing_mininet():
        raise UserError(reason)
    _check_writable(args.json, "--json")
    network = load_topology(args.topology)
    params = param_values(args.param)
    args.scale_mbps = args.scale_mbps or runner.DEFAULT_SCALE_MBPS[args.target]
    try:
        runner.check_scale(network, args.scale_mbps)
    except runner.RunnerError as exc:
        raise UserError(f"--scale-mbps: {exc}") from None
    console.print(f"link scale: 1 model Gbps = {args.scale_mbps:g} Mbps of TCLink bandwidth")
    results = []
    for spec in args.scheme or ["shortest"]:
        scheme, own = scheme_spec(spec)
        try:
            plan = solve(
                network, scheme, SolveOptions(args.time_limit, args.seed, params={**params, **own})
            )
        except SchemeInputError as exc:
            raise UserError(str(exc)) from None
        print_plan(plan)
        emulated = network
        if plan.patch_panel is not None:  # a topology-choosing scheme: build what it chose
            import tempfile

            from controller.model import patch_panel

            emulated = patch_panel.built(network, plan, tempfile.mkdtemp(prefix="ina-chosen-"))
            console.print(
                f"emulating the chosen network {emulated.source} ({len(plan.patch_panel)} links)"
            )
        planned = runner.worker_rate_gbps(plan) * args.scale_mbps

        def show(it: runner.IterationResult, planned: float = planned) -> None:
            goodput = ", ".join(f"{w} {g:.2f}" for w, g in sorted(it.goodput_mbps.items()))
            shard = (
                ""
                if it.model_share is None
                else f" {it.task} (PS {it.ps}, model share {it.model_share:.3f})"
            )
            console.print(
                f"iteration {it.iteration}{shard}: {it.seconds:.2f} s, result "
                f"{'exact' if it.exact else '[red]WRONG[/red]'}, flows into the PS "
                f"{it.ps_link_flows:g} (distinct at the PS {it.ps_flows:g}), payload goodput Mbps "
                f"(plan {planned:.2f} on the wire): "
                f"{goodput}",
                highlight=False,
            )

        try:
            results.append(
                runner.run(
                    emulated,
                    plan,
                    iterations=args.iterations,
                    gradient_mb=args.gradient_mb,
                    target=args.target,
                    scale_mbps=args.scale_mbps,
                    timeout=args.timeout,
                    on_iteration=show,
                    plain_switches=args.plain_switches,
                    switches=args.emulate_switches,
                    agent_processes=args.agent_processes,
                    pace_mbps=args.pace_mbps,
                )
            )
            results[-1].scheme = spec
            console.print(
                "set-up seconds: "
                + ", ".join(f"{step} {sec:.1f}" for step, sec in results[-1].setup_seconds.items()),
                highlight=False,
            )
        except runner.RunnerError as exc:
            console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
            return 1
    _print_runs(results)
    if args.json:
        _write_json(args.json, [r.to_dict() for r in results], "results")
    return 0 if all(r.exact for r in results) else 1


def _print_runs(results: list) -> None:
    table = Table(title="closed loop on Mininet")
    for col in (
        "scheme",
        "plan rate (Gbps)",
        "iterations",
        "mean iteration (s)",
        "flows into PS",
        "results",
    ):
        table.add_column(col)
    for r in results:
        flows = sorted({it.ps_link_flows for it in r.iterations})
        table.add_row(
            r.scheme,
            _fmt(r.plan_rate_gbps),
            str(len(r.iterations)),
            f"{r.mean_seconds:.2f}",
            ", ".join(f"{f:g}" for f in flows),
            "exact" if r.exact else "WRONG",
        )
    print_table(console, table)
    if len(results) >= 2 and results[-1].mean_seconds > 0:
        ratio = results[0].mean_seconds / results[-1].mean_seconds
        console.print(
            f"iteration-time ratio {results[0].scheme}/{results[-1].scheme}: "
            f"{ratio:.2f} (the plans' rates say "
            f"{results[-1].plan_rate_gbps / results[0].plan_rate_gbps:.2f})"
        )


class _Parser(argparse.ArgumentParser):
    """argparse with errors in the CLI's one-paragraph form (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ina", description="Controller for in-network aggregation: plan, push, verify."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("solve", help="compute a routing plan for a topology's jobs")
    p.add_argument("topology", help="topology YAML file")
    p.add_argument(
        "--scheme",
        default="shortest",
        help="routing scheme (default: shortest); `ina schemes` lists them",
    )
    p.add_argument(
        "--json", metavar="OUT", help="write the plan as JSON (`-`: to stdout, the table to stderr)"
    )
    p.add_argument(
        "--time-limit",
        type=positive,
        metavar="S",
        help=f"solver time limit in seconds (default: {_time_limits()})",
    )
    p.add_argument(
        "--seed", type=solver_seed, default=0, help="seed for randomised schemes (default 0)"
    )
    p.add_argument("--warm-start", metavar="PLAN.json", help="previous plan to start from")
    p.add_argument(
        "--param",
        type=param_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="scheme parameter, repeatable (e.g. quantization=100); `ina schemes "
        "NAME` lists a scheme's parameters",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--progress",
        action="store_true",
        help="print progress on stderr (elapsed time, best rate and bound so "
        "far) even when stderr is not a terminal",
    )
    shown.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines (default on a terminal: one every 5 s)",
    )
    p.add_argument(
        "--progress-every",
        type=positive,
        default=5.0,
        metavar="S",
        help="seconds between progress lines (default 5)",
    )
    p.add_argument(
        "--topology-out",
        metavar="FILE.yaml",
        help="write the network a topology-choosing scheme (atro) built",
    )
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser(
        "schemes", help="list the schemes, or one scheme's paper, default time limit and parameters"
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="a scheme (default: list them all)")
    p.set_defaults(func=cmd_schemes)

    p = sub.add_parser("evaluate", help="score a plan independently of the scheme that made it")
    p.add_argument("topology", help="topology YAML file the plan was made for")
    p.add_argument("plan", help="plan JSON file (`ina solve --json`)")
    p.add_argument(
        "--gradient-mb",
        type=positive,
        default=100.0,
        help="gradient size per worker for volume and time (default 100 MB)",
    )
    p.add_argument(
        "--json",
        metavar="OUT",
        help="write the evaluation as JSON (`-`: to stdout, the table to stderr)",
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("show", help="draw a topology and optionally a plan")
    p.add_argument("topology", help="topology YAML file")
    p.add_argument(
        "--plan",
        metavar="PLAN.json",
        help="also draw this plan's paths and aggregation points (a plan made for this topology)",
    )
    p.add_argument(
        "--png",
        required=True,
        metavar="OUT.png",
        help="the picture to write (its directory must exist)",
    )
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("controller", help="solve, push the plan to the switches, keep them so")
    p.add_argument("topology", help="topology YAML file (re-read when it changes)")
    p.add_argument(
        "--scheme",
        default="shortest",
        help="routing scheme for the first plan and every re-plan (default "
        "shortest); `ina schemes` lists them",
    )
    p.add_argument("--plan", metavar="PLAN.json", help="install this plan instead of solving")
    p.add_argument(
        "--switches",
        required=True,
        metavar="FILE.json",
        help='P4Runtime addresses: {"S1": {"address": "HOST:PORT", "device_id": 1}}',
    )
    p.add_argument(
        "--state",
        default="out/controller/state.json",
        help="state file published to host agents and `ina status`",
    )
    p.add_argument("--p4blob", metavar="FILE", help="device config (bmv2 JSON from p4c)")
    p.add_argument(
        "--p4info",
        metavar="FILE",
        help="P4Info text file (default p4src/ina.p4info.txtpb; p4c's for bmv2)",
    )
    p.add_argument(
        "--time-limit",
        type=positive,
        metavar="S",
        help="solver time limit per plan in seconds (default: the scheme's)",
    )
    p.add_argument(
        "--seed", type=solver_seed, default=0, help="seed for randomised schemes (default 0)"
    )
    p.add_argument(
        "--connect-timeout",
        type=positive,
        default=15.0,
        metavar="S",
        help="seconds to wait for every switch's P4Runtime channel at start (default 15)",
    )
    p.add_argument("--once", action="store_true", help="exit once every switch is programmed")
    p.add_argument(
        "--switch-grace",
        type=positive,
        default=10.0,
        metavar="S",
        help="a switch whose P4Runtime channel is down, or that answers no read, "
        "for longer is planned around, all its links at once; back sooner "
        "(a restart), it keeps the plan (default 10)",
    )
    p.add_argument(
        "--probe-interval",
        type=positive,
        default=0.5,
        metavar="S",
        help="seconds between link probes (default 0.5); a link dies after 2 rounds "
        "with neither a probe nor a new frame",
    )
    p.add_argument(
        "--no-link-monitor",
        action="store_true",
        help="watch no links and switches: no probes and no re-plan around failures "
        "(for switches without cabled ports, e.g. embedded switch processes alone, "
        "where every link would read as dead)",
    )
    p.add_argument(
        "--openflow-state",
        metavar="FILE",
        help="the OpenFlow controller's state file (plain switches on Open vSwitch "
        "following this daemon): publish a new plan version to the hosts only "
        "once they hold it",
    )
    p.add_argument(
        "--watch-primary",
        type=Path,
        metavar="STATE.json",
        help="the primary controller's state file: while this one is a backup and "
        "that file says running but goes unwritten for --primary-stale "
        "seconds (a hung primary, whose stream a switch such as bmv2 keeps "
        "open), take over by advertising a higher election id",
    )
    p.add_argument(
        "--primary-stale",
        type=positive,
        default=5.0,
        metavar="S",
        help="seconds without a write that make the watched primary hung "
        "(default 5; it writes every second)",
    )
    p.add_argument(
        "--mark-depth",
        type=mark_depth,
        metavar="N",
        help="switch ports mark INA packets congested from N packets queued ahead of them "
        f"(default: half of the queue each port has: {BMV2_QUEUE_DEPTH // 2} of bmv2's "
        f"{BMV2_QUEUE_DEPTH}, half the qdisc limit of the embedded target's interface; "
        "p4src/README.md)",
    )
    _add_channel_options(p)
    p.add_argument(
        "--api",
        metavar="HOST:PORT",
        help="serve the HTTP API (jobs submitted and ended at run time, topology, "
        "health, Prometheus metrics; OpenAPI at /openapi.json) there, e.g. "
        "127.0.0.1:8080, or PORT alone on 127.0.0.1 (port 0: any free one, "
        "named in the state file); off by default",
    )
    p.add_argument(
        "--api-token-file",
        metavar="FILE",
        help="bearer token that POST and DELETE must carry; required when --api "
        "is not a loopback address",
    )
    p.add_argument(
        "--api-cert",
        type=Path,
        metavar="PEM",
        help="serve the API over HTTPS with this certificate (issued for the API's "
        "address; with --api-key)",
    )
    p.add_argument("--api-key", type=Path, metavar="PEM", help="the --api-cert's private key")
    p.add_argument(
        "--job-slots",
        type=_job_slots,
        default=DEFAULT_JOB_SLOTS,
        metavar="N",
        help=f"with --api, aggregation slots per pipeline of each of the topology "
        f"file's jobs (default {DEFAULT_JOB_SLOTS}, of {SLOT_REGION})",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning"],
        help="log detail on stderr (default info)",
    )
    p.set_defaults(func=cmd_controller)

    p = sub.add_parser("mininet", help="run the closed loop on Mininet with real packets (root)")
    p.add_argument("topology", help="topology YAML file to emulate")
    p.add_argument(
        "--scheme",
        action="append",
        help="routing scheme, optionally with its own parameters "
        "(atp:partial=true); repeat to compare schemes side by side "
        "(default shortest)",
    )
    p.add_argument(
        "--gradient-mb",
        type=positive,
        default=1.0,
        help="gradient size each worker sends per iteration, in MB (default 1)",
    )
    p.add_argument(
        "--iterations", type=count, default=1, help="training iterations per scheme (default 1)"
    )
    p.add_argument(
        "--target",
        choices=["embedded", "bmv2"],
        default="embedded",
        help="switch program: the embedded Python target (default) or bmv2 "
        "simple_switch_grpc running p4src/ina.p4",
    )
    p.add_argument(
        "--plain-switches",
        choices=["p4", "ovs"],
        default="p4",
        help="non-INA switches as the P4 target without aggregation (default) or "
        "as Open vSwitch under an OpenFlow 1.3 controller (os-ken)",
    )
    p.add_argument(
        "--scale-mbps",
        type=positive,
        help="TCLink Mbps per model Gbps (default 2 on the embedded target, 0.5 on "
        "bmv2, which forwards ina.p4 about ten times slower)",
    )
    p.add_argument("--timeout", type=positive, default=120.0, help="per-iteration limit (s)")
    p.add_argument(
        "--pace-mbps",
        type=positive,
        help="workers pace at this many Mbps per model Gbps (default: the link "
        "scale); below it the links never queue, for runs whose packet rate "
        "the switch processes cannot forward at the link scale (200 workers)",
    )
    p.add_argument(
        "--emulate-switches",
        choices=["all", "plan"],
        default="all",
        help="build every switch (default) or only those on the plan's paths "
        "(fewer processes; a re-plan cannot route through the others). Only "
        "the hosts the plan uses are built either way",
    )
    p.add_argument(
        "--agent-processes",
        type=count,
        default=16,
        metavar="N",
        help="worker agent processes: one per worker up to N workers, more "
        "share N processes (default 16)",
    )
    p.add_argument("--time-limit", type=positive, metavar="S", help="solver time limit")
    p.add_argument(
        "--seed", type=solver_seed, default=0, help="seed for randomised schemes (default 0)"
    )
    p.add_argument(
        "--json", metavar="OUT", help="write per-iteration results as JSON (`-`: to stdout)"
    )
    p.add_argument(
        "--param",
        type=param_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="scheme parameter for every --scheme, repeatable (e.g. partial=true)",
    )
    p.set_defaults(func=cmd_mininet)

    p = sub.add_parser("status", help="show switches, plan version, rates and counters")
    p.add_argument(
        "state",
        nargs="?",
        default="out/controller/state.json",
        help="the controller's state file (default out/controller/state.json)",
    )
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="OUT",
        help="print the state file as JSON instead of the tables (or write it to OUT)",
    )
    p.set_defaults(func=cmd_status)

    for register in _plugins():
        register(sub)
    return parser


def _plugins() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommands owned by other modules (topology generators, switch target, benchmarks)."""
    hooks = []
    for module in (
        "controller.model.topogen",
        "dataplane.cli",
        "controller.tools.bench",
        "controller.tools.jobs_cli",
        "controller.tools.train_cli",
    ):
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        if hasattr(mod, "register"):  # a folder without __init__.py yet is not a plugin
            hooks.append(mod.register)
    return hooks


# Characters the tables, help and messages use, spelled in ASCII for an output without them.
_ASCII = {
    "×": "x",
    "–": "-",
    "—": "-",
    "−": "-",
    "…": "...",
    "λ": "lambda",
    "µ": "u",
    "μ": "u",
    "≤": "<=",
    "≥": ">=",
    "→": "->",
    "←": "<-",
    "π": "pi",
    "β": "beta",
    "·": "*",
    "≈": "~",
    "’": "'",
    "‘": "'",
    "“": '"',
    "”": '"',
    "²": "^2",
    "°": " deg",
}


def _in_ascii(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: what the output's encoding lacks, in ASCII (`?` as a last resort)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    spelled = "".join(
        _ASCII.get(char)
        or unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
        or "?"
        for char in exc.object[exc.start : exc.end]
    )
    return spelled, exc.end


def _ascii_locale() -> bool:
    """The C (POSIX) locale: Python writes UTF-8 there (its UTF-8 mode), but the terminal
    takes ASCII. An explicit PYTHONIOENCODING or PYTHONUTF8 is the user's choice and kept."""
    if os.environ.get("PYTHONIOENCODING") or os.environ.get("PYTHONUTF8"):
        return False
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        if value := os.environ.get(var):
            return value in ("C", "POSIX")
    return False


def _plain_output() -> None:
    """A terminal or pipe that cannot take a character gets it in ASCII, never a crash: the
    process's own stdout and stderr keep their encoding with `_in_ascii` for what it lacks (in
    the C locale, ASCII itself). rich then also draws its tables with ASCII lines."""
    codecs.register_error("ina-ascii", _in_ascii)
    ascii_locale = _ascii_locale()
    for stream, original in ((sys.stdout, sys.__stdout__), (sys.stderr, sys.__stderr__)):
        if stream is not original or not isinstance(stream, io.TextIOWrapper):
            continue  # captured or replaced by the caller: theirs to encode
        if ascii_locale:
            stream.reconfigure(encoding="ascii", errors="ina-ascii")
        elif not codecs.lookup(stream.encoding).name.startswith("utf"):
            stream.reconfigure(errors="ina-ascii")


def main(argv: list[str] | None = None) -> int:
    _plain_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    # `--json -`: stdout carries the JSON alone, so what is printed for people goes to stderr.
    console.file = sys.stderr if getattr(args, "json", None) == "-" else None  # type: ignore[assignment]
    try:
        return args.func(args)
    except (InputError, UserError) as exc:
        console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
        return 2
    except (SouthboundError, CompileError) as exc:
        console.print(f"[bold red]error:[/bold red] {exc}", soft_wrap=True, highlight=False)
        return 1
    finally:
        console.file = None  # type: ignore[assignment]


if __name__ == "__main__":
    # Run as `python -m controller.cli`, this file is `__main__`; the plugins import
    # `controller.cli`, whose UserError must be the one `main` catches.
    from controller.cli import main as package_main

    sys.exit(package_main())
