"""`ina bench target`: aggregated fragments per second through one switch, N -> 1, per target.

N sender ports (`--senders`, default 2) feed the same fragments under flows 1..N; the switch
sums each fragment's N copies and sends one fragment to the receiver port. The generator keeps
`window` pairs outstanding (so the switch's queues never overflow and the figure is the switch's,
not the drop rate's) and resends what a CONTROL packet names. The same traffic runs through every
target asked for (`--target embedded --target bmv2`), and on bmv2 also through a forwarding-only
program (p4src/bench/forward.p4: the first sender's frames are forwarded and the others' dropped,
nothing parsed beyond Ethernet) to show what the aggregation costs. Prints JSON and writes JSON +
PNG when asked.

The generator shares the 2 cores with the switch (and, here, with other work), so besides
fragments/s each run reports the switch process's own CPU time per aggregated fragment (user +
system, from /proc): the figure to compare two versions of the embedded target by, since it
does not depend on how fast the generator was scheduled.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4r

from dataplane.bmv2 import Bmv2Missing, free_tcp_port
from dataplane.demo import AGG_FLOW, JOB, TASK, program_aggregation
from dataplane.frame import (
    CONTROL,
    DATA,
    INA_HEADER,
    OFF_INA,
    SLOTS_PER_PIPE,
    Endpoint,
    InaHeader,
    K,
    build_frame,
)
from dataplane.netns import VethNet, in_netns
from dataplane.p4build import P4CompileError, compiler_path
from dataplane.p4rt_client import Client
from dataplane.ports import drain, open_raw
from dataplane.schema import load_p4info
from dataplane.targets import KINDS, Program, missing, program_for, start_target

SRC = Endpoint(b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))
DST = Endpoint(b"\x02\0\0\0\0\x03", bytes([10, 0, 0, 3]))
# Sender port p sends flow p (ports and flows 1..N); the receiver is port N + 1.
FORWARD_P4 = Path(__file__).resolve().parent.parent / "p4src" / "bench" / "forward.p4"
START_WINDOW = 16  # pairs in flight at the start; +1 per completion up to --window
BURST_PAIRS = 16  # pairs sent back to back at most (bmv2 holds about 32 frames per port)
# A fragment not done within 4 smoothed completion times (TCP's rule, Karn's sampling) is sent
# again; before the first sample the workers' default 0.5 s applies.
FIRST_TIMEOUT, MIN_TIMEOUT = 0.5, 0.2  # 0.2 s: Linux TCP's minimum RTO
MAX_SENDERS = 16  # each sender is a veth pair and a socket of the one Python generator
IDLE_SECONDS = 5.0  # no progress for this long ends a run; what is still outstanding is lost


@dataclass(frozen=True)
class Row:
    """One benchmark row: a target running a program."""

    target: str
    program: str  # "ina" (aggregation) or "forward" (forwarding only)

    @property
    def label(self) -> str:
        return f"{self.target} {'ina.p4' if self.program == 'ina' else 'forwarding only'}"


def _copies(frag: int, senders: int) -> tuple[bytes, ...]:
    """Fragment `frag` as sent by each sender (flow = sender port)."""
    elements = bytes(i % 256 for i in range(4 * K))
    return tuple(
        build_frame(SRC, DST, InaHeader(JOB, TASK, DATA, flow, 0, frag), elements)
        for flow in range(1, senders + 1)
    )


@contextmanager
def two_into_one() -> Iterator[tuple[subprocess.Popen, list[socket.socket]]]:
    """An embedded switch on three veths that aggregates ports 1 and 2 into port 3, every slot
    of a pipe in use: (the switch process, the host ends' raw sockets of ports 1, 2, 3)."""
    program = program_for("embedded")
    with VethNet(3) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target("embedded", net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            program_aggregation(client, [1, 2], 3, slots=SLOTS_PER_PIPE)
            ports = [in_netns(net.ns, lambda p=p: open_raw(net.host_if[p])) for p in (1, 2, 3)]
            try:
                yield switch, ports
            finally:
                client.close()
                for sock in ports:
                    sock.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its threads so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Generator:
    """The senders and the receiver of one run, with a worker's reliability (AIMD).

    The window grows from START_WINDOW by one per completed fragment up to `window` and halves
    on a loss; at most BURST_PAIRS pairs leave back to back before the generator waits for
    the switch (on 2 cores a longer burst outruns a switch that is not scheduled meanwhile). A
    fragment is lost when one sent after it completes first (each port and the switch are FIFO, so
    its output would have come first; a fast retransmit) or when it times out (4 smoothed completion
    times, at least MIN_TIMEOUT); all its frames are sent again. A switch may drop a burst at its
    input (bmv2 does beyond about 32 frames per port), and a fragment only counts as lost in the end
    when the switch stops answering altogether.
    """

    def __init__(
        self, net: VethNet, senders: int, fragments: int, window: int, outputs: frozenset[int]
    ):
        self.senders = {
            p: in_netns(net.ns, lambda p=p: open_raw(net.host_if[p])) for p in range(1, senders + 1)
        }
        self.receiver = in_netns(net.ns, lambda: open_raw(net.host_if[senders + 1]))
        self.frames = [_copies(i, senders) for i in range(fragments)]
        self.window, self.outputs = window, outputs
        self.waiting: dict[int, set[int]] = {}  # frag -> flows not seen at the receiver yet
        self.order: OrderedDict[int, float] = OrderedDict()  # frag -> deadline, by last send
        self.first_sent: dict[int, float] = {}  # frags sent once (Karn's rule) -> send time
        self.limit = min(START_WINDOW, window)
        self.srtt: float | None = None
        self.completed = self.next_frag = 0
        self.resent = {"control": 0, "loss": 0, "timeout": 0}
        self.pending: OrderedDict[int, str] = OrderedDict()  # lost frags to resend -> why
        self.start = self.last_progress = time.monotonic()

    def _send(self, frag: int, now: float, ports: tuple[int, ...] | None = None) -> None:
        for port in ports or self.senders:
            self.senders[port].send(self.frames[frag][port - 1])
        rto = FIRST_TIMEOUT if self.srtt is None else max(MIN_TIMEOUT, 4 * self.srtt)
        self.order[frag] = now + rto
        self.order.move_to_end(frag)

    def _lost(self, frags: list[int], why: str) -> None:
        """Queue `frags` for resending (in step, within the burst budget); halve the window."""
        for frag in frags:
            self.first_sent.pop(frag, None)
            del self.order[frag]
            self.pending[frag] = why
        if frags:
            self.limit = max(1, self.limit // 2)

    def on_output(self, frame: bytes) -> None:
        flow, _, frag = INA_HEADER.unpack_from(frame, OFF_INA)[3:6]
        if frag not in self.waiting or frame[OFF_INA + 3] != DATA:
            return
        self.waiting[frag].discard(flow)
        if self.waiting[frag]:
            return
        now = self.last_progress = time.monotonic()
        if frag in self.order:  # what was sent before it and is still missing is lost
            self._lost(list(itertools.takewhile(lambda f: f != frag, self.order)), "loss")
            del self.order[frag]
        self.pending.pop(frag, None)
        del self.waiting[frag]
        self.completed += 1
        self.limit = min(self.limit + 1, self.window)
        sent = self.first_sent.pop(frag, None)
        if sent is not None:
            sample = now - sent
            self.srtt = sample if self.srtt is None else 0.875 * self.srtt + 0.125 * sample

    def on_sender(self, port: int, frame: bytes) -> None:
        header = InaHeader.unpack(frame)
        if header.flags == CONTROL and header.frag_id in self.waiting:
            self._send(header.frag_id, time.monotonic(), (port,))
            self.resent["control"] += 1

    def step(self) -> None:
        """Send at most BURST_PAIRS pairs (resends first), then wait for what comes back."""
        now = time.monotonic()
        self._lost(list(itertools.takewhile(lambda f: self.order[f] < now, self.order)), "timeout")
        budget = BURST_PAIRS
        while self.pending and budget:
            frag, why = self.pending.popitem(last=False)
            self._send(frag, now)
            self.resent[why] += 1
            budget -= 1
        while budget and self.next_frag < len(self.frames) and len(self.waiting) < self.limit:
            self.waiting[self.next_frag] = set(self.outputs)
            self.first_sent[self.next_frag] = now
            self._send(self.next_frag, now)
            self.next_frag += 1
            budget -= 1
        ready = select.select([self.receiver, *self.senders.values()], [], [], 0.05)[0]
        if self.receiver in ready:
            drain(self.receiver, self.on_output, limit=4096)
        for port, sock in self.senders.items():
            if sock in ready:
                drain(sock, functools.partial(self.on_sender, port), limit=4096)

    def run(self) -> dict:
        while (
            self.completed < len(self.frames)
            and time.monotonic() - self.last_progress < IDLE_SECONDS
        ):
            self.step()
        for sock in [self.receiver, *self.senders.values()]:
            sock.close()
        seconds = max(self.last_progress - self.start, 1e-6)  # idle tail excluded
        frames_per_fragment = len(self.senders) + len(self.outputs)  # in and out of the switch
        return {
            "fragments": self.completed,
            "lost": len(self.frames) - self.completed,
            **{f"resent_on_{why}": n for why, n in self.resent.items()},
            "seconds": round(seconds, 3),
            "fragments_per_s": round(self.completed / seconds),
            "packets_per_s": round(self.completed * frames_per_fragment / seconds),
            "payload_mbps": round(self.completed * 4 * K * 8 / seconds / 1e6, 1),
        }


def measure(
    net: VethNet,
    senders: int,
    fragments: int,
    window: int,
    outputs: frozenset[int],
    switch_pid: int,
) -> dict:
    """Send `fragments` fragments from each sender; one is done when DATA frames of every flow
    in `outputs` reached the receiver (the aggregate's flow, or flow 1 through the forwarding
    program). Adds the switch process's CPU time over the run."""
    generator = Generator(net, senders, fragments, window, outputs)
    cpu = cpu_seconds(switch_pid)
    result = generator.run()
    cpu = cpu_seconds(switch_pid) - cpu
    result["switch_cpu_s"] = round(cpu, 2)
    result["switch_cpu_us_per_fragment"] = round(cpu / max(result["fragments"], 1) * 1e6, 1)
    return result


def _forward_program(build: Path) -> Program:
    """p4src/bench/forward.p4 compiled by p4c (bmv2 only)."""
    p4c = compiler_path()
    if p4c is None:
        raise P4CompileError(missing("bmv2") or "p4c-bm2-ss is not on PATH")
    p4info, json_out = build / "forward.p4info.txtpb", build / "forward.json"
    done = subprocess.run(
        [p4c, "--p4runtime-files", str(p4info), "-o", str(json_out), str(FORWARD_P4)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise P4CompileError(f"p4c-bm2-ss rejected {FORWARD_P4}:\n{done.stderr.strip()}")
    return Program(load_p4info(p4info), json_out.read_bytes())


def _program_forwarding(client: Client, senders: int) -> None:
    """forward.p4's one table: the first sender's port goes to the receiver, the other
    senders' frames are dropped, so the receiver gets one frame per fragment, as it does from
    an aggregating switch, and the output port is never oversubscribed."""
    table = next(t for t in client.p4info.tables if t.preamble.name.endswith("port_forward"))
    actions = {a.preamble.name.rsplit(".", 1)[-1]: a for a in client.p4info.actions}
    entities = []
    rules = [(1, "forward", [senders + 1])] + [(p, "drop", []) for p in range(2, senders + 1)]
    for port, action, params in rules:
        entity = p4r.Entity()
        entry = entity.table_entry
        entry.table_id = table.preamble.id
        entry.match.add(field_id=table.match_fields[0].id).exact.value = port.to_bytes(2, "big")
        entry.action.action.action_id = actions[action].preamble.id
        for spec, value in zip(actions[action].params, params, strict=True):
            entry.action.action.params.add(param_id=spec.id, value=value.to_bytes(2, "big"))
        entities.append(entity)
    client.write(*entities)


def run_row(row: Row, senders: int, fragments: int, window: int, build: Path) -> dict:
    """One run of `row` on fresh veths and a fresh switch."""
    program = _forward_program(build) if row.program == "forward" else program_for(row.target)
    with VethNet(senders + 1) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target(row.target, net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            if row.program == "forward":
                _program_forwarding(client, senders)
                result = measure(net, senders, fragments, window, frozenset({1}), switch.pid)
            else:
                program_aggregation(
                    client, list(range(1, senders + 1)), senders + 1, slots=SLOTS_PER_PIPE
                )
                result = measure(net, senders, fragments, window, frozenset({AGG_FLOW}), switch.pid)
                result["switch_counters"] = {
                    name: sum(client.counter(name))
                    for name in ("aggregations_completed", "collisions", "duplicates")
                }
            client.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    return {"target": row.target, "program": row.program, "label": row.label, **result}


def rows_for(targets: list[str], forwarding: bool) -> list[Row]:
    rows = [Row(t, "ina") for t in targets]
    if forwarding and "bmv2" in targets:
        rows.append(Row("bmv2", "forward"))
    return rows


def summarise(runs: list[dict]) -> dict:
    """Per row: the median run's fragments/s, packets/s and switch CPU per fragment, and every
    run's loss and collisions; plus the embedded/bmv2 ratio of aggregated fragments/s when both
    ran."""
    rows: dict[str, dict] = {}
    medians = ("fragments_per_s", "packets_per_s", "switch_cpu_us_per_fragment")
    for run in runs:
        row = rows.setdefault(
            run["label"],
            {
                "target": run["target"],
                "program": run["program"],
                **{name: [] for name in medians},
                "lost": [],
                "collisions": [],
            },
        )
        for name in medians:
            row[name].append(run[name])
        row["lost"].append(run["lost"])
        # None: no counter
        row["collisions"].append(run.get("switch_counters", {}).get("collisions"))
    for row in rows.values():
        for name in medians:
            row[f"median_{name}"] = round(statistics.median(row[name]), 1)
    summary: dict = {"rows": rows}
    embedded, bmv2 = rows.get(Row("embedded", "ina").label), rows.get(Row("bmv2", "ina").label)
    if embedded and bmv2:
        summary["ratio_embedded_over_bmv2"] = round(
            embedded["median_fragments_per_s"] / bmv2["median_fragments_per_s"], 2
        )
    forward = rows.get(Row("bmv2", "forward").label)
    if forward and bmv2:
        summary["bmv2_aggregation_over_forwarding"] = round(
            bmv2["median_fragments_per_s"] / forward["median_fragments_per_s"], 2
        )
    return summary


def plot(report: dict, path: Path) -> None:
    """Bars per row (every run a dot): fragments/s, annotated with lost and collisions, and
    the switch's CPU time per fragment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["summary"]["rows"]
    fig, (rate_ax, cpu_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for i, row in enumerate(rows.values()):
        color = "#4c72b0" if row["program"] == "ina" else "#999999"
        for ax, name in ((rate_ax, "fragments_per_s"), (cpu_ax, "switch_cpu_us_per_fragment")):
            ax.bar(i, row[f"median_{name}"], color=color)
            ax.plot([i] * len(row[name]), row[name], "k.", ms=5)
        collisions = "/".join("-" if c is None else str(c) for c in row["collisions"])
        rate_ax.annotate(
            f"lost {'/'.join(map(str, row['lost']))}\ncollisions {collisions}",
            (i, row["median_fragments_per_s"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    for ax in (rate_ax, cpu_ax):
        ax.set_xticks(range(len(rows)), list(rows), fontsize=9)
    rate_ax.set_yscale("log")
    rate_ax.set_ylabel("fragments/s (log; bar = median, dots = runs)")
    cpu_ax.set_ylabel("switch CPU µs per fragment (user + system)")
    cfg = report["config"]
    fig.suptitle(
        f"{cfg['senders']} -> 1 aggregation, {cfg['fragments']} fragments, window "
        f"{cfg['window']}, K = {K}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_bench_target(args: argparse.Namespace) -> int:
    for option, path in (("--json", args.json), ("--png", args.png)):
        if path and path != "-" and not Path(path).parent.is_dir():  # checked before the run
            print(
                f"error: ina bench target {option} {path}: the directory {Path(path).parent} "
                "does not exist; create it first",
                file=sys.stderr,
            )
            return 2
    log = sys.stderr if args.json == "-" else sys.stdout  # `--json -`: stdout is the JSON's
    targets = list(dict.fromkeys(args.target or ["embedded"]))
    for target in targets:
        reason = missing(target)
        if reason:
            print(f"ina bench target --target {target}: {reason}")
            return 1
    runs = []
    try:
        with tempfile.TemporaryDirectory() as build:
            for run in range(args.runs):
                for row in rows_for(targets, not args.no_forwarding):
                    result = run_row(row, args.senders, args.fragments, args.window, Path(build))
                    print(
                        f"run {run + 1}: {row.label}: {result['fragments_per_s']} fragments/s, "
                        f"switch CPU {result['switch_cpu_us_per_fragment']} µs/fragment, "
                        f"lost {result['lost']}, collisions "
                        f"{result.get('switch_counters', {}).get('collisions', '-')}",
                        flush=True,
                        file=log,
                    )
                    runs.append(result)
    except (P4CompileError, Bmv2Missing, RuntimeError) as exc:
        print(f"ina bench target: {exc}")
        return 1
    report = {
        "config": {
            "senders": args.senders,
            "fragments": args.fragments,
            "window": args.window,
            "k": K,
            "topology": f"{args.senders} -> 1 on veth",
            "runs": args.runs,
        },
        "summary": summarise(runs),
        "runs": runs,
    }
    print(json.dumps(report, indent=2))
    if args.json and args.json != "-":
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.png:
        plot(report, Path(args.png))
    return 0


def _count_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (argparse exits 2 naming the option)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


def add_parser(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `target` under `ina bench` (the controller.tools.bench.COMMANDS convention)."""
    p = bench_subparsers.add_parser(
        "target", help="aggregated fragments/s through one switch, N->1, embedded and/or bmv2"
    )
    p.add_argument(
        "--target",
        action="append",
        choices=KINDS,
        help="switch to measure (repeatable; default embedded)",
    )
    p.add_argument(
        "--senders",
        type=_count_in(2, MAX_SENDERS),
        default=2,
        help=f"sender ports aggregated into one (2..{MAX_SENDERS}, default 2)",
    )
    p.add_argument(
        "--fragments", type=_count_in(1, 10**7), default=50000, help="aggregated fragments to send"
    )
    p.add_argument("--window", type=_count_in(1, 4096), default=256, help="outstanding fragments")
    p.add_argument(
        "--runs", type=_count_in(1, 100), default=1, help="runs of every row (default 1)"
    )
    p.add_argument(
        "--no-forwarding", action="store_true", help="skip bmv2's forwarding-only baseline"
    )
    p.add_argument(
        "--json",
        metavar="OUT",
        help="also write the result here (it is printed on stdout anyway; with `-` "
        "nothing else is)",
    )
    p.add_argument("--png", metavar="OUT", help="and a bar chart here")
    p.set_defaults(func=cmd_bench_target)
