"""`ina bench failover`: how long the switches go without a programming controller when the
primary `ina controller` dies and the backup takes over (RELIABILITY.md section 3).

Every switch of the topology runs as a process without ports (P4Runtime only, no root), on
each target installed. Two controllers install the same plan: the primary and a backup with a
lower `--election-id`. Each round SIGKILLs the primary and times, from the kill, until the
backup's state file shows every switch programmed by it (arbitration, read-back, writing the
difference: nothing, since the plan is there) and how many updates it wrote; then the killed
controller comes back with a higher election id, takes the switches back (preemption, also
timed) and the other one stands by again. Writes `failover.json` and `failover.png`.

`--fault stop` hangs the primary (SIGSTOP) instead: its process answers nothing while its TCP
connection stays open. Each controller watches the other's state file (`--watch-primary`,
`--primary-stale`), so the backup takes over either when the switch closes the hung one's
stream (the embedded target's HTTP/2 keepalive) or when that file goes stale (bmv2 keeps the
stream). Then the stopped controller is resumed (SIGCONT) and timed until it stands by on
every switch; the two swap roles each round.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from controller.model.network import load_topology
from controller.tools.tables import print_table
from dataplane.bmv2 import bmv2_command, free_tcp_port, wait_listening
from dataplane.p4build import compile_for_bmv2
from dataplane.targets import KINDS, missing

EXAMPLE = Path(__file__).resolve().parents[3] / "topologies" / "examples" / "aro-fig1.yaml"
console = Console()


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("failover", help="controller failover: takeover time and writes")
    p.add_argument(
        "--topology", default=str(EXAMPLE), help="topology YAML file (default ARO Fig. 1)"
    )
    p.add_argument("--scheme", default="aro", help="routing scheme (default aro)")
    p.add_argument(
        "--rounds", type=int, default=5, help="failovers measured per target (default 5)"
    )
    p.add_argument(
        "--fault",
        choices=["kill", "stop"],
        default="kill",
        help="kill: SIGKILL the primary (default); stop: SIGSTOP it, then SIGCONT",
    )
    p.add_argument(
        "--primary-stale",
        type=float,
        default=3.0,
        metavar="S",
        help="with --fault stop: each controller's --primary-stale (default 3)",
    )
    p.add_argument(
        "--target",
        choices=KINDS,
        action="append",
        help="repeatable; default: every target installed",
    )
    p.add_argument(
        "--out", default="out/bench/failover", help="output directory (default out/bench/failover)"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    network = load_topology(args.topology)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "topology": network.name,
        "scheme": args.scheme,
        "switches": len(network.switches),
        "rounds": args.rounds,
        "fault": args.fault,
        **({"primary_stale": args.primary_stale} if args.fault == "stop" else {}),
        "targets": {},
    }
    for kind in args.target or KINDS:
        reason = missing(kind)
        if reason:
            console.print(f"[yellow]{kind} skipped[/yellow]: {reason}")
            continue
        console.print(
            f"[bold]{kind}[/bold]: {args.rounds} failover(s) ({args.fault}) on "
            f"{len(network.switches)} switches"
        )
        report["targets"][kind] = _run(network, kind, args)
    (out / "failover.json").write_text(json.dumps(report, indent=2) + "\n")
    _plot(report, out / "failover.png")
    _print(report)
    console.print(f"results in {out / 'failover.json'} and {out / 'failover.png'}")
    return 0


def _run(network, kind: str, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"ina-failover-{kind}-"))  # logs, state files
    switches, procs = {}, []
    try:
        for index, name in enumerate(network.switches, start=1):
            address = f"127.0.0.1:{free_tcp_port()}"
            command = (
                bmv2_command({}, address, device_id=index)
                if kind == "bmv2"
                else [
                    sys.executable,
                    "-m",
                    "dataplane",
                    "switch",
                    "--device-id",
                    str(index),
                    "--grpc-addr",
                    address,
                    "--log-level",
                    "warning",
                ]
            )
            procs.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            wait_listening(address, procs[-1])
            switches[name] = {"address": address, "device_id": index}
        (work / "switches.json").write_text(json.dumps(switches))
        return _rounds(network, kind, args, work)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def _rounds(network, kind: str, args, work: Path) -> dict:
    extra = []
    if kind == "bmv2":
        built = compile_for_bmv2()
        extra = ["--p4blob", str(built.json), "--p4info", str(built.p4info)]

    def start(name: str, election_id: int) -> subprocess.Popen:
        (work / f"{name}.json").unlink(missing_ok=True)  # a killed one's file stays as it was
        log = (work / f"{name}.log").open("ab")
        other = "b" if name == "a" else "a"
        watch = (
            [
                "--watch-primary",
                str(work / f"{other}.json"),
                "--primary-stale",
                str(args.primary_stale),
            ]
            if args.fault == "stop"
            else []
        )
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "controller",
                network.source,
                "--scheme",
                args.scheme,
                "--switches",
                str(work / "switches.json"),
                "--state",
                str(work / f"{name}.json"),
                "--election-id",
                str(election_id),
                "--log-level",
                "warning",
                *extra,
                *watch,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GRPC_VERBOSITY": "NONE"},
        )

    def rows(name: str) -> dict:
        try:
            return json.loads((work / f"{name}.json").read_text())["switches"]
        except (OSError, ValueError, KeyError):
            return {}

    def until(name: str, role: str, timeout: float = 60.0) -> float:
        started = time.monotonic()
        while not (
            (sw := rows(name))
            and all(
                s["role"] == role and (role == "backup" or s["programmed"]) for s in sw.values()
            )
        ):
            if time.monotonic() - started > timeout:
                raise RuntimeError(
                    f"controller {name} was not {role} on every switch within "
                    f"{timeout:g} s (see {work / (name + '.log')})"
                )
            time.sleep(0.005)
        return time.monotonic() - started

    def writes(name: str) -> int:
        return sum(s["writes"][-1] for s in rows(name).values() if s["writes"])

    election = 20
    procs = {"a": start("a", election), "b": start("b", 10)}
    takeovers, after, takeover_writes = [], [], []
    try:
        until("a", "primary")
        until("b", "backup")
        primary, backup = "a", "b"
        for _ in range(args.rounds):
            if args.fault == "stop":
                procs[primary].send_signal(signal.SIGSTOP)
            else:
                procs[primary].kill()
                procs[primary].wait(timeout=10)
            takeovers.append(until(backup, "primary"))
            takeover_writes.append(writes(backup))
            if args.fault == "stop":
                procs[primary].send_signal(signal.SIGCONT)
                after.append(until(primary, "backup"))
                primary, backup = backup, primary
                continue
            election += 1  # above every id the switches have seen: it preempts
            procs[primary] = start(primary, election)
            after.append(until(primary, "primary"))
            until(backup, "backup")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                proc.wait(timeout=10)
    return {
        "takeover_seconds": takeovers,
        _SECOND[args.fault][0]: after,
        "takeover_writes": takeover_writes,
    }


# What each round times after the takeover: (report key, table column, plot title).
_SECOND = {
    "kill": (
        "preempt_seconds",
        "restart + preemption median (s)",
        "killed controller restarts\nand preempts (incl. its start)",
    ),
    "stop": (
        "standby_seconds",
        "resumed one stands by, median (s)",
        "stopped controller resumed\n(SIGCONT) until it stands by",
    ),
}


def _print(report: dict) -> None:
    table = Table(
        title=f"failover on {report['topology']} ({report['switches']} switches, "
        f"{report['scheme']} plan)"
    )
    key, column, _ = _SECOND[report["fault"]]
    for col in (
        "target",
        "rounds",
        "takeover median (s)",
        "takeover max (s)",
        "writes at takeover",
        column,
    ):
        table.add_column(col)
    for kind, r in report["targets"].items():
        table.add_row(
            kind,
            str(len(r["takeover_seconds"])),
            f"{_median(r['takeover_seconds']):.3f}",
            f"{max(r['takeover_seconds']):.3f}",
            str(sorted(set(r["takeover_writes"]))),
            f"{_median(r[key]):.3f}",
        )
    print_table(console, table)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(report["targets"])
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
    key, _, title = _SECOND[report["fault"]]
    signal_name = "SIGKILLed" if report["fault"] == "kill" else "SIGSTOPped"
    panels = (
        ("takeover_seconds", f"backup takes over\n(primary {signal_name})", "tab:red"),
        (key, title, "tab:blue"),
    )
    for ax, (key, title, color) in zip(axes, panels, strict=True):
        for i, kind in enumerate(kinds):
            values = report["targets"][kind][key]
            ax.scatter([i] * len(values), values, color=color, alpha=0.7)
        ax.set_xticks(range(len(kinds)), kinds)
        ax.set_xlim(-0.5, len(kinds) - 0.5)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("s until every switch is programmed")
    fig.suptitle(
        f"controller failover, {report['topology']} ({report['switches']} switches)", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
