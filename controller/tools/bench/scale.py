"""`ina bench scale`: the closed loop on Mininet at growing numbers of workers (root).

For each worker count W it generates a leaf-spine shaped like ARO's default (24 leaves, 24
spines, 24 servers per leaf for 200 workers) scaled to keep its servers per worker: n =
ceil(24 sqrt(W / 200)) leaves, spines and servers per leaf. Links keep the target's scale;
the workers of both schemes are paced by one factor, set so that the faster plan's workers
send `--wire-mbps` together (`wire_scale`). On each target and for each scheme it runs
`ina mininet`'s loop and measures the set-up (Mininet's build, the switches listening,
the controller done programming them), the plan push (table entries written per second over
P4Runtime: the updates of every switch's first push over the slowest push, as the controller
programs them concurrently), the iteration time at a fixed gradient size, whether the sums
are exact, the peak memory of all processes together (sampled every 0.5 s) and their CPU
seconds, and what the iteration cost beyond its packets (the switches' collisions and
duplicates, the workers' resends by cause, the PS's duplicates). It writes `scale.json` and
`scale.png` into the output directory, with progress on stderr; a size that fails is
recorded with its error and the next one still runs. `--add` adds the runs to the JSON
already there (same settings), so the sizes can be measured in several shorter sessions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Self

import psutil
from rich.console import Console
from rich.table import Table

from controller.emulation.mininet_runner import (
    DEFAULT_AGENT_PROCESSES,
    DEFAULT_SCALE_MBPS,
    Emulation,
    RunnerError,
    missing_mininet,
)
from controller.model.network import dump_topology, load_topology
from controller.model.topogen import Workload, leaf_spine
from controller.service.daemon import POLL_INTERVAL
from controller.solvers import solve
from controller.southbound.p4runtime import COUNTERS
from controller.tools.tables import print_table

console = Console(stderr=True)
SCHEMES = ("shortest", "aro")
WIRE_MBPS = {"embedded": 8.0, "bmv2": 2.0}  # --wire-mbps's default per target


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scale",
        help="closed loop on Mininet at 16 to 200 workers: set-up, "
        "plan push, iteration time, memory",
    )
    p.add_argument(
        "--workers",
        default="16,50,100,200",
        help="comma-separated worker counts (default 16,50,100,200)",
    )
    p.add_argument(
        "--target",
        action="append",
        choices=["embedded", "bmv2"],
        help="switch target, repeatable (default embedded)",
    )
    p.add_argument(
        "--scheme",
        action="append",
        choices=SCHEMES,
        help="run only this scheme, repeatable (default both; both are solved, as the "
        "pace depends on the faster plan)",
    )
    p.add_argument(
        "--gradient-mb",
        type=float,
        default=0.01,
        help="gradient size each worker sends, in MB (default 0.01)",
    )
    p.add_argument(
        "--wire-mbps",
        type=float,
        help="what all workers of the faster plan send together, in Mbps: sets "
        "the link scale of each size (default 8 on the embedded target, 2 "
        "on bmv2, which forwards ina.p4 several times slower)",
    )
    p.add_argument(
        "--scale-mbps",
        type=float,
        help="TCLink Mbps per model Gbps (default: ina mininet's for the target); "
        "workers pace at the --wire-mbps budget below it",
    )
    p.add_argument(
        "--emulate-switches",
        choices=["all", "plan"],
        default="plan",
        help="build every switch or only the plan's (default plan)",
    )
    p.add_argument(
        "--agent-processes",
        type=int,
        default=DEFAULT_AGENT_PROCESSES,
        help=f"worker agent processes (default {DEFAULT_AGENT_PROCESSES})",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="per-iteration limit (s)")
    p.add_argument("--out", default="out/bench/scale", help="output directory")
    p.add_argument(
        "--add",
        action="store_true",
        help="add the runs to the output directory's scale.json (its settings must be "
        "these), replacing those of the same target, workers and scheme",
    )
    p.set_defaults(func=main)


def side(workers: int) -> int:
    """Leaves, spines and servers per leaf for `workers` workers: ARO's 24 at 200, the same
    servers per worker below."""
    return max(2, math.ceil(24 * math.sqrt(workers / 200)))


def main(args: argparse.Namespace) -> int:
    if reason := missing_mininet():
        console.print(f"error: ina bench scale: {reason}")
        return 2
    try:
        counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        console.print(
            f"error: ina bench scale: --workers {args.workers!r} is not a "
            "comma-separated list of worker counts"
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "gradient_mb": args.gradient_mb,
        "wire_mbps": args.wire_mbps,
        "emulate_switches": args.emulate_switches,
        "agent_processes": args.agent_processes,
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "runs": [],
    }
    if args.add:
        try:
            report = earlier(out / "scale.json", report)
        except ValueError as exc:
            console.print(f"error: ina bench scale --add: {exc}", highlight=False)
            return 2
    for target in args.target or ["embedded"]:
        for workers in counts:
            n = side(workers)
            path = out / f"leaf-spine-{n}x{n}-{workers}w.yaml"  # `ina controller` reads it
            dump_topology(
                leaf_spine(
                    leaves=n, spines=n, hosts_per_leaf=n, workload=Workload(workers_per_job=workers)
                ),
                path,
            )
            network = load_topology(path)
            plans = {scheme: solve(network, scheme) for scheme in SCHEMES}
            pace = wire_scale(plans, args.wire_mbps or WIRE_MBPS[target])
            for scheme, plan in plans.items():
                if args.scheme and scheme not in args.scheme:
                    continue
                console.print(
                    f"[bold]{target}[/bold] {workers} workers ({n}x{n} leaf-spine, "
                    f"{n} servers per leaf), {scheme}, paced at {pace:.3g} Mbps per "
                    "Gbps"
                )
                row = {
                    "target": target,
                    "workers": workers,
                    "leaves": n,
                    "spines": n,
                    "scheme": scheme,
                    **measure(network, plan, pace, target, args),
                }
                console.print(f"  {_summary(row)}", highlight=False)
                report["runs"] = replaced(report["runs"], row)
                (out / "scale.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, out / "scale.png")
    _print(report)
    console.print(f"results in {out / 'scale.json'} and {out / 'scale.png'}")
    return 0


SETTINGS = ("gradient_mb", "wire_mbps", "emulate_switches", "agent_processes")


def earlier(path: Path, report: dict) -> dict:
    """`report` with the runs of the scale.json at `path`, if there is one; ValueError when
    that file was measured with other settings (its rows would not compare)."""
    if not path.exists():
        return report
    try:
        old = json.loads(path.read_text())
        runs = list(old["runs"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a scale.json ({exc})") from None
    differ = [
        f"{k} {old.get(k)} there, {report[k]} here" for k in SETTINGS if old.get(k) != report[k]
    ]
    if differ:
        raise ValueError(f"{path} was measured with other settings: " + "; ".join(differ))
    return {**report, "runs": runs}


def replaced(runs: list[dict], row: dict) -> list[dict]:
    """`runs` with `row` in place of the run of the same target, workers and scheme (or
    added), ordered by target, then workers, then scheme as SCHEMES lists them."""
    key = (row["target"], row["workers"], row["scheme"])
    kept = [r for r in runs if (r["target"], r["workers"], r["scheme"]) != key] + [row]
    targets = list(dict.fromkeys(r["target"] for r in kept))
    return sorted(
        kept, key=lambda r: (targets.index(r["target"]), r["workers"], SCHEMES.index(r["scheme"]))
    )


def wire_scale(plans: dict, wire_mbps: float) -> float:
    """Mbps per model Gbps at which the workers of the fastest plan send `wire_mbps` together
    (their pace; the links keep the target's scale). The emulated switches forward thousands
    of packets a second, not the plans' Gbps: paced far beyond that (ARO's 33 Gbps a worker
    at 2 Mbps per Gbps is 60,000 packets a second each), every link drops, a fragment waits
    for the resends of all its workers, and at 50 workers ARO took 60 s where shortest took
    13 (89,444 resends). Under the budget both schemes are paced by the same factor, so their
    times compare as their rates."""
    return wire_mbps / max(len(p.tasks[0].paths) * p.tasks[0].rate_gbps for p in plans.values())


def measure(network, plan, pace: float, target: str, args: argparse.Namespace) -> dict:
    """One run of one iteration: set-up, push, iteration, exactness, peak memory, CPU."""
    scale = args.scale_mbps or DEFAULT_SCALE_MBPS[target]
    row: dict = {
        "plan_rate_gbps": plan.tasks[0].rate_gbps,
        "scale_mbps_per_gbps": scale,
        "pace_mbps_per_gbps": pace,
        "load_before": os.getloadavg()[0],
    }
    peak = PeakMemory()
    cpu_before = _cpu_seconds()
    started = time.monotonic()
    try:
        with (
            peak,
            Emulation(
                network,
                plan,
                target=target,
                scale_mbps=scale,
                pace_mbps=pace,
                switches=args.emulate_switches,
                agent_processes=args.agent_processes,
            ) as emu,
        ):
            row["setup_seconds"] = dict(emu.setup_seconds)
            row["hosts"] = sum(1 for n in emu.nodes if n in network.hosts)
            row["switches"] = sum(1 for n in emu.nodes if n in network.switches)
            row["push"] = _push(emu.state()["switches"])
            try:
                (it,) = emu.iterate(args.gradient_mb, 1, args.timeout)
            finally:  # what the switches counted tells a collapse too
                time.sleep(2 * POLL_INTERVAL)  # the controller's next read of the counters
                row["switch_counters"] = _counters(emu.state()["switches"])
            row.update(
                iteration_seconds=round(it.seconds, 3),
                exact=it.exact,
                ps_exact=it.ps_exact,
                retransmissions=it.retransmissions,
                ps_link_flows=it.ps_link_flows,
                resends=_resends(it.worker_reports),
                ps_duplicates=it.ps_report.get("duplicates_ignored"),
            )
    except RunnerError as exc:
        row["error"] = str(exc)[:600]
    row.update(
        wall_seconds=round(time.monotonic() - started, 1),
        cpu_seconds=round(_cpu_seconds() - cpu_before, 1),
        peak_rss_mb=round(peak.bytes / 2**20),
        processes_at_peak=peak.processes,
        peak_rss_mb_by_kind=peak.by_kind,
        cpu_by_kind=peak.cpu_by_kind,
        load_after=os.getloadavg()[0],
    )
    return row


def _push(switches: dict) -> dict:
    """Entries written on the first push and their rate: every switch is programmed at once,
    so the slowest push is the time they all took."""
    writes = sum(d["writes"][0] for d in switches.values() if d["writes"])
    seconds = max(
        (d["pushes_seconds"][0] for d in switches.values() if d["pushes_seconds"]), default=0.0
    )
    return {
        "entries": writes,
        "seconds": round(seconds, 3),
        "entries_per_second": round(writes / seconds) if seconds else None,
    }


def _resends(reports: dict) -> dict:
    """The workers' resends by cause, summed over the workers."""
    causes = ("resent_on_timeout", "resent_on_control", "resent_on_loss")
    return {
        c.removeprefix("resent_on_"): sum(r.get(c, 0) for r in reports.values()) for c in causes
    }


def _counters(switches: dict) -> dict:
    """Each switch counter summed over the switches, and the switch with the most collisions."""
    totals = {c: sum(sum(d["counters"].get(c, [])) for d in switches.values()) for c in COUNTERS}
    worst = max(
        switches, key=lambda n: sum(switches[n]["counters"].get("collisions", [])), default=None
    )
    return {
        **totals,
        "most_collisions": worst
        and [worst, sum(switches[worst]["counters"].get("collisions", []))],
    }


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class PeakMemory:
    """Samples the resident memory of this process and all its descendants every 0.5 s while
    entered; keeps the peak of the total, the process count then, and per kind of process
    (switch, worker agent, PS, controller, other) their number and largest RSS then. It also
    keeps each process's CPU seconds as last seen (`cpu_by_kind`: per kind the total and the
    busiest process), which shows the one process a run waits for."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.bytes, self.processes = interval, 0, 0
        self.by_kind: dict[str, dict] = {}
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (kind, CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.interval):
            total, kinds = 0, dict[str, list[int]]()
            for proc in [me, *me.children(recursive=True)]:
                try:
                    rss, cmd, cpu = proc.memory_info().rss, proc.cmdline(), proc.cpu_times()
                except psutil.Error:
                    continue
                total += rss
                kinds.setdefault(_kind(cmd), []).append(rss)
                self._cpu[proc.pid] = (_kind(cmd), cpu.user + cpu.system)
            if total > self.bytes:
                self.bytes, self.processes = total, sum(len(v) for v in kinds.values())
                self.by_kind = {
                    k: {"processes": len(v), "max_rss_mb": round(max(v) / 2**20)}
                    for k, v in sorted(kinds.items())
                }

    @property
    def cpu_by_kind(self) -> dict[str, dict]:
        kinds: dict[str, list[float]] = {}
        for kind, seconds in self._cpu.values():
            kinds.setdefault(kind, []).append(seconds)
        return {
            k: {"cpu_seconds": round(sum(v), 1), "busiest_process": round(max(v), 1)}
            for k, v in sorted(kinds.items())
        }


def _kind(cmd: list[str]) -> str:
    words = set(cmd[:4])
    if "switch" in words or any("simple_switch" in w for w in cmd[:1]):
        return "switch"
    for kind in ("workers", "worker", "ps", "controller"):
        if kind in words:
            return "worker agents" if kind.startswith("worker") else kind
    return "other (this process, Mininet's shells)"


def _summary(row: dict) -> str:
    if "error" in row:
        return f"error: {row['error'][:300]}"
    setup = ", ".join(f"{k} {v:.1f} s" for k, v in row["setup_seconds"].items())
    return (
        f"set-up {setup}; push {row['push']['entries']} entries in "
        f"{row['push']['seconds']:.2f} s; iteration {row['iteration_seconds']:.2f} s, "
        f"{'exact' if row['exact'] else 'WRONG'}; peak {row['peak_rss_mb']} MB in "
        f"{row['processes_at_peak']} processes; CPU {row['cpu_seconds']:.0f} s"
    )


def _print(report: dict) -> None:
    table = Table(title=f"closed loop at scale ({report['gradient_mb']:g} MB gradient)")
    for col in (
        "target",
        "workers",
        "scheme",
        "set-up (s)",
        "push (entries/s)",
        "iteration (s)",
        "results",
        "peak memory (GB)",
        "CPU (s)",
    ):
        table.add_column(col)
    for r in report["runs"]:
        if "error" in r:
            table.add_row(
                r["target"],
                str(r["workers"]),
                r["scheme"],
                "-",
                "-",
                "-",
                "error",
                f"{r['peak_rss_mb'] / 1024:.1f}",
                f"{r['cpu_seconds']:.0f}",
            )
            continue
        table.add_row(
            r["target"],
            str(r["workers"]),
            r["scheme"],
            f"{sum(r['setup_seconds'].values()):.1f}",
            str(r["push"]["entries_per_second"]),
            f"{r['iteration_seconds']:.2f}",
            "exact" if r["exact"] else "WRONG",
            f"{r['peak_rss_mb'] / 1024:.1f}",
            f"{r['cpu_seconds']:.0f}",
        )
    print_table(Console(), table)


def _plot(report: dict, path: Path) -> None:
    """Four panels against the worker count, one line per target and scheme: set-up time,
    plan push rate, iteration time, peak memory. A run whose iteration failed still shows
    what it measured before (set-up, push, memory)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    panels = [
        ("set-up (s)", "setup_seconds", lambda r: sum(r["setup_seconds"].values())),
        ("plan push (entries/s)", "push", lambda r: r["push"]["entries_per_second"] or 0),
        (
            f"iteration, {report['gradient_mb']:g} MB (s)",
            "iteration_seconds",
            lambda r: r["iteration_seconds"],
        ),
        ("peak memory, all processes (GB)", "peak_rss_mb", lambda r: r["peak_rss_mb"] / 1024),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for ax, (title, needs, value) in zip(axes, panels, strict=True):
        ok = [r for r in runs if needs in r]
        for target in dict.fromkeys(r["target"] for r in runs):
            for scheme in SCHEMES:
                rows = sorted(
                    (r for r in ok if (r["target"], r["scheme"]) == (target, scheme)),
                    key=lambda r: r["workers"],
                )
                if rows:
                    ax.plot(
                        [r["workers"] for r in rows],
                        [value(r) for r in rows],
                        marker="o",
                        linestyle="-" if scheme == "aro" else "--",
                        label=f"{target} {scheme}",
                    )
        ax.set_xlabel("workers")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
