"""`ina bench reliability`: faults at run time on Mininet (root), RELIABILITY.md sections 1, 2, 6.

- `--item calibrate`: what each impairment really does to numbered frames on one link
  (loss, copies, reordering measured at the receiver; controller.emulation.faults.calibrate).
- `--item loss`: loss 1 % and 5 %, duplication 2 %, reordering 10 % on every link
  (controller.emulation.faults.impair, nftables: this kernel has no netem), against a run without
  impairment: every result exact, every fragment finished once (the PS's counts),
  retransmissions and slowdown. Every iteration is journaled as it ends (`loss.jsonl`,
  controller.tools.bench.loss_journal): `--resume` goes on from there.
- `--item congestion`: every link at 30 % of the workers' pace with 2-packet queues: plan
  versions without a failure, then the time from a real cut to the new plan; the depth each
  kind of port marks congestion from (`mark_from`).
- `--item longrun`: many iterations with one switch restart (at `--every`/2, then every
  `--every`) and one link cut (at each multiple of `--every`, mended after that iteration) in
  every `--every` iterations; RSS of every process after each iteration (controller, switches,
  this process) and each agent's peak (workers and PSs are new processes each iteration).
- `--item replan-memory` (no root): the daemon's re-plan step `--iterations` times in one
  process, RSS after each: the solver's one-time load told apart from growth per re-plan.
- `--item idle-memory` (no root): the daemon in this process for `--seconds` against
  embedded switch processes without ports; RSS and Python's allocated blocks every 30 s.

Each writes `<item>.json` and `<item>.png` under `--out`. Timing lives here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console
from rich.table import Table

from controller.emulation.faults.delayline import COUNTS as DELAY_LINE_COUNTS
from controller.emulation.faults.impair import (
    Impairment,
    LinkImpairments,
    congest,
    interface_packets,
    mark_thresholds,
    measured,
)
from controller.emulation.faults.longrun import idle_memory, long_run, replan_memory
from controller.emulation.mininet_runner import (
    Emulation,
    IterationResult,
    RunnerError,
    missing_mininet,
)
from controller.model.network import load_topology
from controller.solvers import solve
from controller.tools.bench.loss_journal import (
    PER_ITERATION,
    Journal,
    JournalMismatch,
    iteration_record,
    recovery_cost,
    summary,
)
from controller.tools.tables import print_table
from dataplane.targets import missing

EXAMPLES = Path(__file__).resolve().parents[3] / "topologies" / "examples"
IMPAIRMENTS = (
    Impairment("loss", 1),
    Impairment("loss", 5),
    Impairment("duplicate", 2),
    Impairment("reorder", 10),
)
# Per item, what RELIABILITY.md measures with: 20 x 4 MB for loss; congestion at 30 %
# of the pace, where 4 MB would take minutes an iteration; the long run's 200 short iterations.
ITEM_DEFAULTS: dict[str, dict[str, float]] = {
    "loss": {"iterations": 20, "gradient_mb": 4.0, "timeout": 600.0},
    "congestion": {"iterations": 3, "gradient_mb": 0.1, "timeout": 120.0},
    "longrun": {"iterations": 200, "gradient_mb": 0.05, "timeout": 120.0},
    "replan-memory": {"iterations": 1000},
}
console = Console(width=160)  # progress lines; tables take the width they need (`_table`)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reliability",
        help="faults on Mininet: loss, duplication, reordering, congestion, long run (root)",
    )
    p.add_argument(
        "--item",
        required=True,
        choices=("calibrate", "loss", "congestion", "longrun", "replan-memory", "idle-memory"),
        help="what to measure (the module's docstring, RELIABILITY.md)",
    )
    p.add_argument(
        "--topology",
        action="append",
        metavar="FILE.yaml",
        help="topology (repeatable; default ARO Fig. 1)",
    )
    p.add_argument("--scheme", default="aro", help="routing scheme (default aro)")
    p.add_argument(
        "--iterations",
        type=int,
        help="default per item: loss 20, congestion 3, longrun 200, replan-memory 1000",
    )
    p.add_argument(
        "--gradient-mb", type=float, help="default per item: loss 4, congestion 0.1, longrun 0.05"
    )
    p.add_argument(
        "--target",
        choices=("embedded", "bmv2"),
        default="embedded",
        help="switch target (bmv2: simple_switch_grpc running p4c's build of ina.p4)",
    )
    p.add_argument(
        "--scale-mbps",
        type=float,
        default=None,
        help="Mbps of emulated link per model Gbps (default: the runner's)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        help="per iteration (s); default per item: loss 600, congestion and longrun 120",
    )
    p.add_argument(
        "--every",
        type=int,
        default=50,
        help="longrun: one switch restart and one link cut in every EVERY iterations "
        "(restart at EVERY/2 + n·EVERY, cut at n·EVERY; at least 2)",
    )
    p.add_argument(
        "--seconds", type=float, default=600.0, help="idle-memory: how long the controller runs"
    )
    p.add_argument(
        "--impairment",
        action="append",
        metavar="none|KIND:PERCENT",
        help="loss: run only these rows (repeatable), e.g. --impairment none "
        "--impairment loss:1; default: none, loss:1, loss:5, duplicate:2, "
        "reorder:10. At 20 x 4 MB one row takes tens of minutes, so "
        "rows can be measured one at a time",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="loss: go on from <out>/loss.jsonl, running only the iterations each "
        "row still lacks (a row whose iteration hung stays as it is); the same "
        "--gradient-mb, --timeout, --target, --scheme and --scale-mbps",
    )
    p.add_argument(
        "--reference-iterations",
        type=int,
        metavar="N",
        help="loss: unimpaired iterations that open each impaired row's sitting on "
        "its own emulation, before the impairment goes on, so that a row measured "
        "over sittings has a slowdown within each (default 1 with --resume, else 0)",
    )
    p.add_argument("--cut", default="L1,S1", help="link cut (A,B)")
    p.add_argument("--restart", default="S1", help="longrun: switch restarted")
    p.add_argument(
        "--out",
        default="docs/benchmarks/reliability",
        help="output directory (default docs/benchmarks/reliability)",
    )
    p.set_defaults(func=main)


def with_item_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fills --iterations, --gradient-mb and --timeout the user left out with the item's own."""
    for name, value in ITEM_DEFAULTS.get(args.item, {}).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main(args: argparse.Namespace) -> int:
    args = with_item_defaults(args)
    for option, value in (
        ("--iterations", args.iterations),
        ("--gradient-mb", args.gradient_mb),
        ("--timeout", args.timeout),
        ("--seconds", args.seconds),
    ):
        if value is not None and value <= 0:
            print(
                f"error: ina bench reliability: {option} {value:g}: it counts or measures "
                "something, so it must be above 0",
                file=sys.stderr,
            )
            return 2
    if args.item == "longrun" and args.every < 2:
        print(
            f"error: ina bench reliability: --every {args.every}: the long run puts one "
            "switch restart and one link cut in every EVERY iterations, so EVERY must be "
            "at least 2",
            file=sys.stderr,
        )
        return 2
    if args.item in ("loss", "congestion", "longrun") and (reason := missing_mininet()):
        print(f"error: ina bench reliability: --item {args.item}: {reason}", file=sys.stderr)
        return 2
    if args.target == "bmv2" and (reason := missing("bmv2")):
        print(f"error: ina bench reliability: --target bmv2: {reason}", file=sys.stderr)
        return 2
    if args.reference_iterations is None:
        args.reference_iterations = 1 if args.resume else 0
    if args.reference_iterations < 0:
        print(
            f"error: ina bench reliability: --reference-iterations "
            f"{args.reference_iterations}: a count of iterations, 0 or more",
            file=sys.stderr,
        )
        return 2
    for option, given in (
        ("--impairment", args.impairment),
        ("--resume", args.resume),
        ("--reference-iterations", args.reference_iterations),
    ):
        if given and args.item != "loss":
            print(
                f"error: ina bench reliability: {option} belongs to --item loss, not to "
                f"--item {args.item}",
                file=sys.stderr,
            )
            return 2
    try:
        args.rows = _rows(args.impairment)
    except ValueError as exc:
        print(f"error: ina bench reliability: --impairment {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    topologies = args.topology or [str(EXAMPLES / "aro-fig1.yaml")]
    report = {
        "item": args.item,
        "target": args.target,
        "iterations": args.iterations,
        "gradient_mb": args.gradient_mb,
        "timeout_seconds": args.timeout,
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.item == "calibrate":
        from controller.emulation.faults.calibrate import calibrate

        report["links"] = [calibrate(imp) for imp in IMPAIRMENTS]
        _table("one impaired link, 3000 numbered frames", report["links"])
    elif args.item == "loss":
        try:
            journal = Journal(out / "loss.jsonl", _journal_settings(args), args.resume)
        except JournalMismatch as exc:
            print(f"error: ina bench reliability --resume: {exc}", file=sys.stderr)
            return 2
        report["runs"] = [_impaired_runs(path, args, journal) for path in topologies]
    elif args.item == "congestion":
        report["runs"] = [_congestion_run(path, args) for path in topologies]
    elif args.item == "replan-memory":
        report["runs"] = [_replan_memory(path, args) for path in topologies]
    elif args.item == "idle-memory":
        report["runs"] = [_idle_memory(path, args) for path in topologies]
    else:
        report["runs"] = [_long_run(path, args) for path in topologies]
    (out / f"{args.item}.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, out / f"{args.item}.png")
    console.print(f"results in {out / (args.item + '.json')} and {out / (args.item + '.png')}")
    return 0


def _emulation(path: str, args: argparse.Namespace) -> Emulation:
    network = load_topology(path)
    return Emulation(
        network, solve(network, args.scheme), target=args.target, scale_mbps=args.scale_mbps
    )


def _iterations(
    emu: Emulation, args: argparse.Namespace, label: str, first: int = 1
) -> Iterator[IterationResult]:
    """Iterations `first`..`args.iterations`, each yielded as it ends."""
    for k in range(first, args.iterations + 1):
        (it,) = emu.iterate(args.gradient_mb, k, args.timeout)
        rto = statistics.median(r.get("rto_ms", 0) for r in it.worker_reports.values())
        console.print(
            f"  {label}: iteration {k}: {it.seconds:.2f} s, exact {it.exact}, "
            f"{it.retransmissions} resent, RTO {rto:g} ms",
            highlight=False,
        )
        yield it


def _until_hang(iterations: Iterator[IterationResult]) -> tuple[list[IterationResult], str | None]:
    """The iterations that ended and, if one hung, its error: the ones before a hang were
    measured and still count."""
    ended: list[IterationResult] = []
    try:
        for it in iterations:
            ended.append(it)  # list() would lose them at the raise
    except RunnerError as exc:
        return ended, str(exc)[:2000]
    return ended, None


def _summary(results: list[IterationResult]) -> dict:
    return summary([iteration_record(it) for it in results])


def _rows(asked: list[str] | None) -> tuple[Impairment | None, ...]:
    """The loss item's rows: None for the unimpaired one, in the order asked."""
    if not asked:
        return (None, *IMPAIRMENTS)
    rows: list[Impairment | None] = []
    for text in asked:
        if text == "none":
            rows.append(None)
            continue
        kind, sep, percent = text.partition(":")
        if not sep:
            raise ValueError(f"{text!r}: expected 'none' or KIND:PERCENT, e.g. loss:1")
        try:
            rows.append(Impairment(kind, float(percent)))
        except ValueError as exc:  # a kind we do not know, or a percent out of range
            raise ValueError(f"{text!r}: {exc}") from None
    if len(set(rows)) != len(rows):
        raise ValueError("names a row twice")
    return tuple(rows)


def _journal_settings(args: argparse.Namespace) -> dict:
    """What every iteration of a journal must share to be one measurement."""
    return {
        "item": "loss",
        "target": args.target,
        "scheme": args.scheme,
        "gradient_mb": args.gradient_mb,
        "timeout_seconds": args.timeout,
        "scale_mbps": args.scale_mbps,
    }


def _impaired_runs(path: str, args: argparse.Namespace, journal: Journal) -> dict:
    """A run without impairment, then one per impairment (or the rows `--impairment` asks
    for), each on a fresh emulation; rows the journal already holds run only the iterations
    they lack (`--resume`)."""
    topology = Path(path).stem
    for imp in args.rows:
        label = imp.label() if imp else "none"
        row = journal.row(topology, label)
        done = len(row.records)
        if row.error or done >= args.iterations:
            console.print(
                f"[bold]{topology}[/bold]: {label}: kept from {journal.path} "
                f"({done} iterations" + (", then a hang" if row.error else "") + ")"
            )
            continue
        console.print(
            f"[bold]{topology}[/bold]: {label}" + (f", from iteration {done + 1}" if done else "")
        )
        journal.started(topology, label)
        error = None
        with _emulation(path, args) as emu:
            if imp:
                _reference_iterations(emu, args, journal, topology, label)
            before = interface_packets(emu)
            with LinkImpairments(emu, imp) if imp else nullcontext() as faults:
                try:
                    for it in _iterations(emu, args, label, first=done + 1):
                        journal.iteration(topology, label, iteration_record(it))
                except RunnerError as exc:
                    error = str(exc)[:2000]
                chains = faults.counters() if faults else {}
            rates = measured(emu, chains, before, interface_packets(emu)) if faults else {}
            if faults and faults.unread:  # their frames are missing from every count above
                rates["interfaces_unread"] = len(faults.unread)
            delay_lines = (
                {
                    key: sum(link[key] for link in faults.delayline_stats.values())
                    for key in DELAY_LINE_COUNTS
                }
                if faults and faults.delayline_stats
                else {}
            )
            switch_dups = sum(
                sum(s["counters"].get("duplicates", [])) for s in emu.state()["switches"].values()
            )
            journal.ended(
                topology,
                label,
                {
                    "measured": rates,
                    "error": error,
                    "plan_versions": emu.state()["version"],
                    "delay_lines": delay_lines,
                    "switch_duplicates": switch_dups,
                },
            )
    runs = {label: journal.row(topology, label).report() for label in journal.labels(topology)}
    base = runs["none"]["mean_seconds"] if "none" in runs else None
    for run in runs.values():
        run["slowdown"] = run["mean_seconds"] / base if base and run["mean_seconds"] else None
        run["recovery"] = recovery_cost(run)
    _table(
        f"{topology}: {args.iterations} × {args.gradient_mb:g} MB",
        [
            {
                "impairment": k,
                **{
                    f: _counted(v, f) if f in PER_ITERATION else v[f]
                    for f in (
                        "exact",
                        "fragments",
                        "fragments_finished",
                        "miscounted",
                        "retransmissions",
                        "resent_on_timeout",
                        "resent_on_loss",
                        "duplicates_ignored_at_ps",
                        "switch_duplicates",
                        "plan_versions",
                    )
                },
                "mean_s": _rounded(v["mean_seconds"]),
                "slowdown": _rounded(v["slowdown"]),
                "slowdown_own_ref": _rounded(v["slowdown_against_own_references"]),
                "hit_%": v["measured"].get("hit_percent", 0.0),
                "rx/offered": v["measured"].get("received_per_offered", 1.0),
            }
            for k, v in runs.items()
        ],
    )
    _table(
        f"{topology}: what recovery cost against what was lost",
        [
            {
                "impairment": k,
                "lost": _dash(r["frames_lost"]),
                "lost c/r/a/o": "/".join(str(n) for n in (r["frames_lost_by_kind"] or {}).values())
                or "–",
                "resent": _dash(r["resends"]),
                "loss/timeout/control": "/".join(str(n) for n in r["resends_by_cause"].values()),
                "resent per lost": _dash(r["resends_per_lost_frame"]),
                "resent % of sent": _dash(r["resent_percent"]),
                "queries/NACKs": f"{_dash(r.get('queries'))}/{_dash(r.get('nacks'))}",
            }
            for k, r in ((k, v["recovery"]) for k, v in runs.items())
        ],
    )
    for label, run in runs.items():
        if run["delay_lines"]:
            held = run["delay_lines"]["held"]
            console.print(
                f"{topology}: {label}: the delay lines held {held} frames: "
                + ", ".join(
                    f"{k.replace('_', ' ')} {v}"
                    for k, v in run["delay_lines"].items()
                    if k != "held"
                ),
                highlight=False,
            )
        if len(run["sittings"]) > 1:
            _table(
                f"{topology}: {label}, measured over {len(run['sittings'])} sittings",
                [
                    {
                        "sitting": n,
                        "code": sitting["code_revision"],
                        "iterations": sitting["iterations"],
                        "mean_s": _rounded(sitting["mean_seconds"]),
                        "resent per iteration": round(
                            sitting["retransmissions"] / sitting["iterations"]
                        ),
                        "reference_s": _rounded(sitting["reference_mean_seconds"]),
                        "slowdown": _rounded(sitting["slowdown"]),
                    }
                    for n, sitting in enumerate(run["sittings"], start=1)
                ],
            )
    return {"topology": Path(path).stem, "runs": runs}


def _reference_iterations(
    emu: Emulation, args: argparse.Namespace, journal: Journal, topology: str, label: str
) -> None:
    """`--reference-iterations` unimpaired iterations on the row's own emulation, numbered
    past the row's (the iteration number is the epoch: neighbours must differ)."""
    first = args.iterations + 1
    try:
        for k in range(first, first + args.reference_iterations):
            (it,) = emu.iterate(args.gradient_mb, k, args.timeout)
            console.print(
                f"  {label}: reference without impairment: {it.seconds:.2f} s, "
                f"exact {it.exact}, {it.retransmissions} resent",
                highlight=False,
            )
            journal.reference(topology, label, iteration_record(it))
    except RunnerError as exc:  # the sitting has no (further) reference; the row goes on
        console.print(
            f"  {label}: a reference iteration did not end ({str(exc)[:300]}); "
            "this sitting's slowdown has no reference of its own",
            highlight=False,
        )


def _counted(run: dict, key: str) -> int | str:
    """A per-iteration count of `run`, or "–" when no iteration finished (reports written
    before such counts were null say 0 there, so the finished count decides)."""
    return run[key] if run["iterations_completed"] else "–"


def _dash(value: object) -> object:
    """`value`, or "–" when there is none (nothing dropped, or no iteration finished)."""
    return "–" if value is None else value


def _rounded(value: float | None) -> float | str:
    """A figure to 2 decimals, or "–" where there is none (no finished iteration, no "none"
    row to compare with): a 0 there would read as a measurement."""
    return "–" if value is None else round(value, 2)


def _congestion_run(path: str, args: argparse.Namespace) -> dict:
    """Default 1000-packet queues (probes wait seconds) and 2-packet queues (probes dropped)."""
    runs = {
        label: _congested(path, args, queue)
        for label, queue in (("1000-packet queues", None), ("2-packet queues", 2))
    }
    _table("congestion: every link at 30 % of the workers' pace", congestion_rows(runs, args))
    return {"topology": Path(path).stem, "link": args.cut.split(","), "queues": runs}


def congestion_rows(runs: dict[str, dict], args: argparse.Namespace) -> list[dict]:
    """The printed table of `_congestion_run`: a row per queue setting."""
    return [
        {
            "queues": label,
            "marks from (frames queued)": _mark_from(r["mark_from"]),
            "iterations ended": f"{r['congested']['iterations_completed']} of {args.iterations}",
            "plan versions, no failure": r["congested"]["plan_versions"],
            "exact": r["congested"]["exact"] and r["after_cut"]["exact"],
            "link-rounds saved by counters": r["congested"]["link_monitor"]["saved_by_traffic"],
            "plan versions after 1 cut": r["after_cut"]["plan_versions"],
            "cut → new plan (s)": round(r.get("cut_to_new_plan_seconds") or -1, 2),
        }
        for label, r in runs.items()
    ]


def _mark_from(found: dict[str, dict[str, int]]) -> str:
    """`mark_thresholds`'s answer in a cell: "switch ports 1, worker ports 1" (a kind whose
    ports differ lists each depth with its count of ports)."""
    cells = []
    for kind, depths in found.items():
        if len(depths) == 1:
            cells.append(f"{kind} {next(iter(depths))}")
        elif depths:
            cells.append(f"{kind} " + " / ".join(f"{d} ({n})" for d, n in depths.items()))
    return ", ".join(cells)


def _congested(path: str, args: argparse.Namespace, queue: int | None) -> dict:
    a, b = args.cut.split(",")
    events: dict = {}
    with _emulation(path, args) as emu:
        congest(emu, 0.3, queue)
        events["mark_from"] = mark_thresholds(emu)
        results, error = _until_hang(
            _iterations(emu, args, f"congested, queue {queue or 'default'}")
        )
        if error:  # recorded: the iterations and plan versions up to then still count
            events["error"] = error
        state = emu.state()
        congested = _summary(results)
        events["congested"] = {
            **congested,
            "exact": congested["exact"] and not error,
            "plan_versions": state["version"],
            "replans": state["replans"],
            "link_monitor": state["link_monitor"],
        }

        def cut() -> None:
            emu.wait_for_traffic(packets=100)
            emu.set_link(a, b, up=False)
            cut_at = time.monotonic()
            while time.monotonic() - cut_at < 30:
                if emu.state()["version"] > events["congested"]["plan_versions"]:
                    events["cut_to_new_plan_seconds"] = time.monotonic() - cut_at
                    return
                time.sleep(0.02)

        try:
            (it,) = emu.iterate(args.gradient_mb, args.iterations + 1, args.timeout, during=cut)
            exact = it.exact
        except RunnerError as exc:
            events["error_after_cut"] = str(exc)[:2000]
            exact = False
        time.sleep(3)
        state = emu.state()
        events["after_cut"] = {
            "exact": exact,
            "plan_versions": state["version"],
            "dead_links": state["dead_links"],
            "replans": state["replans"],
            "link_monitor": state["link_monitor"],
        }
    return events


def _long_run(path: str, args: argparse.Namespace) -> dict:
    with _emulation(path, args) as emu:
        record = long_run(
            emu,
            iterations=args.iterations,
            every=args.every,
            gradient_mb=args.gradient_mb,
            timeout=args.timeout,
            cut=tuple(args.cut.split(",")),
            restart=args.restart,
            progress=_long_run_progress,
        )
    record["topology"] = Path(path).stem
    series = record["rss_kb_per_iteration"]
    marks = sorted(
        {
            0,
            len(record["iterations"]) // 4,
            len(record["iterations"]) // 2,
            3 * len(record["iterations"]) // 4,
            len(record["iterations"]) - 1,
        }
    )
    _table(
        f"long run: {args.iterations} iterations, {record['exact_count']} exact, "
        f"{len(record['events'])} faults, {record['plan_versions']} plan versions, "
        f"{record['wall_seconds'] / 60:.1f} min; RSS (MB) at start, after iterations "
        + ", ".join(str(m + 1) for m in marks),
        [
            {
                "process": n,
                "start": f"{(v['start'] or 0) / 1024:.1f}",
                **{f"it {m + 1}": f"{series[n][m] / 1024:.1f}" for m in marks},
            }
            for n, v in record["rss_kb"].items()
        ]
        + [
            {
                "process": f"{n} (peak, new each iteration)",
                "start": f"{v['first'] / 1024:.1f}",
                **{f"it {m + 1}": "" for m in marks[:-1]},
                f"it {marks[-1] + 1}": f"{v['last'] / 1024:.1f}",
            }
            for n, v in record["agent_peak_rss_kb"].items()
        ],
    )
    return record


def _replan_memory(path: str, args: argparse.Namespace) -> dict:
    """The controller's memory step told from a trend: `--iterations` re-plans in one process."""
    from rich.progress import track

    steps = iter(track(range(args.iterations), description="re-plans", console=console))

    def progress(_k: int) -> None:
        next(steps, None)

    record = replan_memory(
        load_topology(path),
        args.scheme,
        tuple(args.cut.split(",")),
        args.iterations,
        progress=progress,
    )
    after = record["rss_kb_after_replan"]
    record["topology"] = Path(path).stem
    _table(
        f"{Path(path).stem}: RSS (MB) of one process re-planning {args.iterations} times",
        [
            {
                "before the first solve": f"{record['rss_kb_before_first_solve'] / 1024:.1f}",
                "after it": f"{record['rss_kb_after_first_solve'] / 1024:.1f}",
                "after re-plan 1": f"{after[0] / 1024:.1f}",
                f"after re-plan {len(after) // 2}": f"{after[len(after) // 2 - 1] / 1024:.1f}",
                f"after re-plan {len(after)}": f"{after[-1] / 1024:.1f}",
            }
        ],
    )
    return record


def _idle_memory(path: str, args: argparse.Namespace) -> dict:
    """The idle controller's RSS and Python blocks over `--seconds` (its warnings about the
    dead links of switches without ports are expected and kept out of the output)."""
    import logging

    network = load_topology(path)
    plan = solve(network, args.scheme)
    logging.disable(logging.CRITICAL)
    try:
        record = idle_memory(
            network,
            plan,
            args.seconds,
            progress=lambda t: console.print(f"  {t:.0f} s", highlight=False),
        )
    finally:
        logging.disable(logging.NOTSET)
    record["topology"] = Path(path).stem
    settled = record["samples"][1:] or record["samples"]  # after start-up (imports, install)
    first, last = settled[0], settled[-1]
    t = [x["seconds"] for x in settled]

    def slope(key: str) -> float:  # least squares, per second: a trend, not two noisy ends
        return (
            statistics.linear_regression(t, [x[key] for x in settled]).slope
            if len(settled) > 1
            else 0.0
        )

    record["slopes_per_second"] = {
        "rss_kb": slope("rss_kb"),
        "python_blocks": slope("python_blocks"),
    }
    _table(
        f"{Path(path).stem}: the idle controller, from {first['seconds']:.0f} s to "
        f"{last['seconds']:.0f} s",
        [
            {
                "RSS start (MB)": f"{first['rss_kb'] / 1024:.1f}",
                "RSS end (MB)": f"{last['rss_kb'] / 1024:.1f}",
                "RSS trend (kB/s)": f"{record['slopes_per_second']['rss_kb']:.2f}",
                "Python blocks start": first["python_blocks"],
                "Python blocks end": last["python_blocks"],
                "blocks trend (/s)": f"{record['slopes_per_second']['python_blocks']:.2f}",
            }
        ],
    )
    return record


def _long_run_progress(k: int, row: dict) -> None:
    event = row.get("event")
    console.print(
        f"  iteration {k}: "
        + (f"{row['seconds']:.2f} s" if row["seconds"] is not None else "FAILED")
        + f", exact {row['exact']}"
        + (f", {event['event']} ({_event_detail(event)})" if event else "")
        + (f", {row['error'][:300]}" if "error" in row else ""),
        highlight=False,
    )


def _event_detail(event: dict) -> str:
    if "error" in event:
        return event["error"]
    if event["event"] == "restart":
        return (
            f"boot {event.get('boot_seconds', 0):.2f} s, re-push "
            f"{event.get('repush_seconds', 0):.2f} s"
        )
    return (
        f"new plan {event.get('cut_to_new_plan_seconds', float('nan')):.2f} s after the cut, "
        f"plan version {event['plan_version_after']} at its end"
    )


def _table(title: str, rows: list[dict], out: Console | None = None) -> None:
    """Print `rows` (dicts with the same keys) as a table, whole (controller.tools.tables)."""
    if not rows:
        return
    out = out or console
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    print_table(out, table)


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    item = report["item"]
    if item == "calibrate":
        fig, ax = plt.subplots(figsize=(7, 4))
        links = report["links"]
        x = range(len(links))
        for offset, (key, colour) in enumerate(
            (
                ("lost_percent", "tab:red"),
                ("copies_percent", "tab:blue"),
                ("reordered_percent", "tab:green"),
            )
        ):
            ax.bar(
                [i + 0.25 * offset for i in x],
                [r[key] for r in links],
                0.25,
                color=colour,
                label=key.replace("_percent", " %"),
            )
        ax.set_xticks([i + 0.25 for i in x], [r["impairment"] for r in links])
        ax.set_ylabel("% of frames sent")
        ax.legend()
    elif item == "loss":
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for run in report["runs"]:
            labels = list(run["runs"])
            axes[0].plot(
                labels,
                [run["runs"][k]["slowdown"] or float("nan") for k in labels],
                marker="o",
                label=run["topology"],
            )
            # Rows measured in sittings with their own references (`--reference-iterations`):
            # that ratio too, since a none row from another machine can read very differently.
            own = [run["runs"][k].get("slowdown_against_own_references") for k in labels]
            if any(own):
                axes[0].plot(
                    labels,
                    [s or float("nan") for s in own],
                    marker="o",
                    linestyle="none",
                    fillstyle="none",
                    markersize=9,
                    label=f"{run['topology']}, against each sitting's own reference",
                )
            resent = [_counted(run["runs"][k], "retransmissions") for k in labels]
            axes[1].plot(
                labels,
                [float("nan") if n == "–" else n for n in resent],
                marker="o",
                label=run["topology"],
            )
            for label, slowdown, text in _unfinished_marks(
                run["runs"], report["iterations"], report.get("timeout_seconds")
            ):
                axes[0].plot([label], [slowdown], marker="x", color="tab:red", markersize=10)
                axes[0].annotate(
                    text,
                    (label, slowdown),
                    textcoords="offset points",
                    xytext=(-8, -4),
                    ha="right",
                    va="top",
                    color="tab:red",
                )
        axes[0].set_ylabel("mean iteration time / no impairment")
        axes[1].set_ylabel("retransmissions (all iterations)")
        for ax in axes:
            ax.margins(x=0.15, y=0.1)
            ax.legend()
    elif item == "congestion":
        fig, ax = plt.subplots(figsize=(8, 4))
        runs = report["runs"][0]["queues"]
        labels = list(runs)
        x = range(len(labels))
        ax.bar(
            [i - 0.2 for i in x],
            [runs[k]["congested"]["plan_versions"] for k in labels],
            0.4,
            color="tab:green",
            label="congestion only",
        )
        ax.bar(
            [i + 0.2 for i in x],
            [runs[k]["after_cut"]["plan_versions"] for k in labels],
            0.4,
            color="tab:blue",
            label="congestion + 1 real cut",
        )
        ax.set_xticks(
            list(x),
            [
                f"{k}\ncut → new plan "
                f"{runs[k].get('cut_to_new_plan_seconds') or float('nan'):.2f} s"
                + (
                    f"\nmarks from: {_mark_from(runs[k]['mark_from'])}"
                    if "mark_from" in runs[k]
                    else ""
                )
                for k in labels
            ],
        )
        ax.set_ylabel("plan versions (1 = never re-planned)")
        ax.set_title("every link at 30 % of the pace (ARO Fig. 1)")
        ax.legend()
    elif item == "idle-memory":
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for run in report["runs"]:
            t = [x["seconds"] for x in run["samples"]]
            axes[0].plot(t, [x["rss_kb"] / 1024 for x in run["samples"]], label=run["topology"])
            axes[1].plot(t, [x["python_blocks"] for x in run["samples"]], label=run["topology"])
        axes[0].set_ylabel("RSS of the controller (MB)")
        axes[1].set_ylabel("Python allocated blocks")
        for ax in axes:
            ax.set_xlabel("seconds")
            ax.legend()
    elif item == "replan-memory":
        fig, ax = plt.subplots(figsize=(8, 4))
        for run in report["runs"]:
            after = run["rss_kb_after_replan"]
            ax.plot(
                [-1, 0, *range(1, len(after) + 1)],
                [
                    kb / 1024
                    for kb in (
                        run["rss_kb_before_first_solve"],
                        run["rss_kb_after_first_solve"],
                        *after,
                    )
                ],
                label=run["topology"],
            )
        ax.set_xlabel("re-plans (-1: before the first solve, 0: after it)")
        ax.set_ylabel("RSS of the process (MB)")
        ax.set_ylim(bottom=0)
        ax.legend()
    else:
        _plot_long_run(report["runs"][0], plt)
        fig = plt.gcf()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _unfinished_marks(
    rows: dict, iterations: int, timeout: float | None
) -> list[tuple[str, float, str]]:
    """(row, slowdown, note) for each row of a loss run that did not finish every iteration,
    so that the plot shows it instead of leaving it out: a row with no finished iteration
    sits at the least slowdown its timeout proves (timeout / the unimpaired mean); one with
    some at the slowdown of those it finished."""
    base = rows.get("none", {}).get("mean_seconds")
    marks = []
    for label, row in rows.items():
        done = row["iterations_completed"]
        if done == iterations and not row.get("error"):
            continue
        if done and row.get("slowdown"):
            marks.append((label, row["slowdown"], f"{done} of {iterations} finished"))
        elif base and timeout:
            marks.append((label, timeout / base, f"not finished in {timeout:g} s: > this"))
    return marks


def _plot_long_run(run: dict, plt) -> None:
    """Iteration time, then RSS against iteration of every long-lived process and the peak of
    every agent, with the faults marked (red: cut, blue: restart)."""
    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    done = [i for i in run["iterations"] if i["seconds"] is not None]
    axes[0].plot([i["k"] for i in done], [i["seconds"] for i in done], marker=".", linestyle="none")
    wrong = [i["k"] for i in run["iterations"] if not i["exact"]]
    if wrong:
        axes[0].plot(wrong, [0] * len(wrong), "rx", label="not exact / failed")
        axes[0].legend()
    axes[0].set_ylabel("transfer seconds")
    ks = range(len(run["iterations"]) + 1)  # 0: before the first iteration
    for name, series in run["rss_kb_per_iteration"].items():
        first = run["rss_kb"][name]["start"] or series[0]
        axes[1].plot(ks, [kb / 1024 for kb in (first, *series)], label=name)
    for name, series in run["agent_peak_rss_kb_per_iteration"].items():
        axes[2].plot([k for k, _ in series], [kb / 1024 for _, kb in series], label=name)
    axes[1].set_ylabel("RSS after the iteration (MB; 0: at start)")
    axes[2].set_ylabel("agent peak RSS (MB, a new process each iteration)")
    for ax in axes:
        for event in run["events"]:
            ax.axvline(
                event["iteration"],
                linestyle="--",
                linewidth=0.8,
                color="tab:red" if event["event"] == "cut" else "tab:blue",
            )
        ax.set_xlabel("iteration (red: link cut, blue: switch restart)")
    for ax in axes[1:]:
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"{run['topology']}: {run['exact_count']}/{len(run['iterations'])} exact, "
        f"{len(run['events'])} faults"
    )
