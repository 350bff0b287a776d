"""`ina bench target`: aggregated fragments per second through one switch, 2 -> 1, per target.

Two sender ports feed the same fragments under flows 1 and 2; the switch sums each pair and
sends one fragment to the receiver port. The generator keeps `window` pairs outstanding (so the
switch's queues never overflow and the figure is the switch's, not the drop rate's) and
resends what a CONTROL packet names. The same traffic runs through every target asked for
(`--target embedded --target bmv2`), and on bmv2 also through a forwarding-only program
(p4src/bench/forward.p4: the first frame of each pair is forwarded and the second dropped,
nothing parsed beyond Ethernet) to show what the aggregation costs. Prints JSON and writes JSON + PNG when asked.
"""

from __future__ import annotations

import argparse
import itertools
import json
import select
import statistics
import subprocess
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4r

from controller.p4build import P4CompileError, compiler_path
from dataplane.bmv2 import Bmv2Missing, free_tcp_port
from dataplane.demo import AGG_FLOW, JOB, TASK, program_aggregation
from dataplane.frame import (
    CONTROL,
    DATA,
    INA_HEADER,
    OFF_INA,
    Endpoint,
    InaHeader,
    K,
    build_frame,
)
from dataplane.netns import VethNet, in_netns
from dataplane.p4rt_client import Client
from dataplane.ports import drain, open_raw
from dataplane.schema import load_p4info
from dataplane.targets import KINDS, Program, missing, program_for, start_target

SRC = Endpoint(b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))
DST = Endpoint(b"\x02\0\0\0\0\x03", bytes([10, 0, 0, 3]))
SENDERS, RECEIVER = (1, 2), 3
FLOWS = (1, 2)  # sender port p sends flow p
FORWARD_P4 = Path(__file__).resolve().parent.parent / "p4src" / "bench" / "forward.p4"
START_WINDOW = 16  # pairs in flight at the start; +1 per completion up to --window
BURST_PAIRS = 16  # pairs sent back to back at most (bmv2 holds about 32 frames per port)
# A fragment not done within 4 smoothed completion times (TCP's rule, Karn's sampling) is sent
# again; before the first sample the workers' default 0.5 s applies.
FIRST_TIMEOUT, MIN_TIMEOUT = 0.5, 0.2  # 0.2 s: Linux TCP's minimum RTO
IDLE_SECONDS = 5.0  # no progress for this long ends a run; what is still outstanding is lost


@dataclass(frozen=True)
class Row:
    """One benchmark row: a target running a program."""

    target: str
    program: str  # "ina" (aggregation) or "forward" (forwarding only)

    @property
    def label(self) -> str:
        return f"{self.target} {'ina.p4' if self.program == 'ina' else 'forwarding only'}"


def _pair(frag: int) -> tuple[bytes, bytes]:
    elements = bytes(range(4 * K))
    return tuple(build_frame(SRC, DST, InaHeader(JOB, TASK, DATA, flow, 0, frag), elements)
                 for flow in FLOWS)  # type: ignore[return-value]


class Generator:
    """The two senders and the receiver of one run, with a worker's reliability (AIMD).

    The window grows from START_WINDOW by one per completed fragment up to `window` and halves
    on a loss; at most BURST_PAIRS pairs leave back to back before the generator waits for
    the switch (on 2 cores a longer burst outruns a switch that is not scheduled meanwhile). A fragment is lost when one sent after it completes first (each port and the
    switch are FIFO, so its output would have come first; a fast retransmit) or when it times
    out (4 smoothed completion times, at least MIN_TIMEOUT); both frames are sent again. A
    switch may drop a burst at its input (bmv2 does beyond about 32 frames per port), and a
    fragment only counts as lost in the end when the switch stops answering altogether.
    """

    def __init__(self, net: VethNet, fragments: int, window: int, outputs: frozenset[int]):
        self.senders = {p: in_netns(net.ns, lambda p=p: open_raw(net.host_if[p]))
                        for p in SENDERS}
        self.receiver = in_netns(net.ns, lambda: open_raw(net.host_if[RECEIVER]))
        self.frames = [_pair(i) for i in range(fragments)]
        self.window, self.outputs = window, outputs
        self.waiting: dict[int, set[int]] = {}  # frag -> flows not seen at the receiver yet
        self.order: OrderedDict[int, float] = OrderedDict()  # frag -> deadline, by last send
        self.first_sent: dict[int, float] = {}  # frags sent once (Karn's rule) -> send time
        self.limit, self.srtt = min(START_WINDOW, window), None
        self.completed = self.next_frag = 0
        self.resent = {"control": 0, "loss": 0, "timeout": 0}
        self.pending: OrderedDict[int, str] = OrderedDict()  # lost frags to resend -> why
        self.start = self.last_progress = time.monotonic()

    def _send(self, frag: int, now: float, ports: tuple[int, ...] = SENDERS) -> None:
        for port in ports:
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
        self._lost(list(itertools.takewhile(lambda f: self.order[f] < now, self.order)),
                   "timeout")
        budget = BURST_PAIRS
        while self.pending and budget:
            frag, why = self.pending.popitem(last=False)
            self._send(frag, now)
            self.resent[why] += 1
            budget -= 1
        while (budget and self.next_frag < len(self.frames)
               and len(self.waiting) < self.limit):
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
                drain(sock, lambda f, port=port: self.on_sender(port, f), limit=4096)

    def run(self) -> dict:
        while (self.completed < len(self.frames)
               and time.monotonic() - self.last_progress < IDLE_SECONDS):
            self.step()
        for sock in [self.receiver, *self.senders.values()]:
            sock.close()
        seconds = max(self.last_progress - self.start, 1e-6)  # idle tail excluded
        return {"fragments": self.completed, "lost": len(self.frames) - self.completed,
                **{f"resent_on_{why}": n for why, n in self.resent.items()},
                "seconds": round(seconds, 3), "fragments_per_s": round(self.completed / seconds),
                "payload_mbps": round(self.completed * 4 * K * 8 / seconds / 1e6, 1)}


def measure(net: VethNet, fragments: int, window: int, outputs: frozenset[int]) -> dict:
    """Send `fragments` pairs; a fragment is done when DATA frames of every flow in `outputs`
    reached the receiver (the aggregate's flow, or flow 1 through the forwarding program)."""
    return Generator(net, fragments, window, outputs).run()


def _forward_program(build: Path) -> Program:
    """p4src/bench/forward.p4 compiled by p4c (bmv2 only)."""
    p4c = compiler_path()
    if p4c is None:
        raise P4CompileError(missing("bmv2") or "p4c-bm2-ss is not on PATH")
    p4info, json_out = build / "forward.p4info.txtpb", build / "forward.json"
    done = subprocess.run([p4c, "--p4runtime-files", str(p4info), "-o", str(json_out),
                           str(FORWARD_P4)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise P4CompileError(f"p4c-bm2-ss rejected {FORWARD_P4}:\n{done.stderr.strip()}")
    return Program(load_p4info(p4info), json_out.read_bytes())


def _program_forwarding(client: Client) -> None:
    """forward.p4's one table: the first sender's port goes to the receiver, the second
    sender's frames are dropped, so the receiver gets one frame per pair, as it does from an
    aggregating switch, and the output port is never oversubscribed."""
    table = next(t for t in client.p4info.tables if t.preamble.name.endswith("port_forward"))
    actions = {a.preamble.name.rsplit(".", 1)[-1]: a for a in client.p4info.actions}
    entities = []
    for port, action, params in ((SENDERS[0], "forward", [RECEIVER]), (SENDERS[1], "drop", [])):
        entity = p4r.Entity()
        entry = entity.table_entry
        entry.table_id = table.preamble.id
        entry.match.add(field_id=table.match_fields[0].id).exact.value = port.to_bytes(2, "big")
        entry.action.action.action_id = actions[action].preamble.id
        for spec, value in zip(actions[action].params, params, strict=True):
            entry.action.action.params.add(param_id=spec.id, value=value.to_bytes(2, "big"))
        entities.append(entity)
    client.write(*entities)


def run_row(row: Row, fragments: int, window: int, build: Path) -> dict:
    """One run of `row` on fresh veths and a fresh switch."""
    program = _forward_program(build) if row.program == "forward" else program_for(row.target)
    with VethNet(3) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target(row.target, net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            if row.program == "forward":
                _program_forwarding(client)
                result = measure(net, fragments, window, frozenset(FLOWS[:1]))
            else:
                program_aggregation(client, list(SENDERS), RECEIVER, slots=4096)
                result = measure(net, fragments, window, frozenset({AGG_FLOW}))
                result["switch_counters"] = {
                    name: sum(client.counter(name))
                    for name in ("aggregations_completed", "collisions", "duplicates")}
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
    """Per row: the median run's fragments/s and every run's loss and collisions; plus the
    embedded/bmv2 ratio of aggregated fragments/s when both ran."""
    rows: dict[str, dict] = {}
    for run in runs:
        row = rows.setdefault(run["label"], {"target": run["target"], "program": run["program"],
                                             "fragments_per_s": [], "lost": [], "collisions": []})
        row["fragments_per_s"].append(run["fragments_per_s"])
        row["lost"].append(run["lost"])
        row["collisions"].append(run.get("switch_counters", {}).get("collisions"))  # None: no counter
    for row in rows.values():
        row["median_fragments_per_s"] = round(statistics.median(row["fragments_per_s"]))
    summary: dict = {"rows": rows}
    embedded, bmv2 = rows.get(Row("embedded", "ina").label), rows.get(Row("bmv2", "ina").label)
    if embedded and bmv2:
        summary["ratio_embedded_over_bmv2"] = round(
            embedded["median_fragments_per_s"] / bmv2["median_fragments_per_s"], 2)
    forward = rows.get(Row("bmv2", "forward").label)
    if forward and bmv2:
        summary["bmv2_aggregation_over_forwarding"] = round(
            bmv2["median_fragments_per_s"] / forward["median_fragments_per_s"], 2)
    return summary


def plot(report: dict, path: Path) -> None:
    """Bars: fragments/s per row (every run), annotated with lost and collisions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["summary"]["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, row) in enumerate(rows.items()):
        values = row["fragments_per_s"]
        ax.bar(i, row["median_fragments_per_s"], color="#4c72b0" if row["program"] == "ina"
               else "#999999")
        ax.plot([i] * len(values), values, "k.", ms=5)
        collisions = "/".join("-" if c is None else str(c) for c in row["collisions"])
        ax.annotate(f"lost {'/'.join(map(str, row['lost']))}\ncollisions {collisions}",
                    (i, row["median_fragments_per_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), list(rows), fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("fragments/s (log; bar = median, dots = runs)")
    cfg = report["config"]
    ax.set_title(f"2 -> 1 aggregation, {cfg['fragments']} fragments, window {cfg['window']}, "
                 f"K = {K}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_bench_target(args: argparse.Namespace) -> int:
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
                    result = run_row(row, args.fragments, args.window, Path(build))
                    print(f"run {run + 1}: {row.label}: {result['fragments_per_s']} fragments/s, "
                          f"lost {result['lost']}, collisions "
                          f"{result.get('switch_counters', {}).get('collisions', '-')}",
                          flush=True)
                    runs.append(result)
    except (P4CompileError, Bmv2Missing, RuntimeError) as exc:
        print(f"ina bench target: {exc}")
        return 1
    report = {"config": {"fragments": args.fragments, "window": args.window, "k": K,
                         "topology": "2 -> 1 on veth", "runs": args.runs},
              "summary": summarise(runs), "runs": runs}
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.png:
        plot(report, Path(args.png))
    return 0


def add_parser(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `target` under `ina bench` (the controller.bench.COMMANDS convention)."""
    p = bench_subparsers.add_parser(
        "target", help="aggregated fragments/s through one switch, 2->1, embedded and/or bmv2")
    p.add_argument("--target", action="append", choices=KINDS,
                   help="switch to measure (repeatable; default embedded)")
    p.add_argument("--fragments", type=int, default=50000, help="aggregated fragments to send")
    p.add_argument("--window", type=int, default=256, help="outstanding fragment pairs")
    p.add_argument("--runs", type=int, default=1, help="runs of every row (default 1)")
    p.add_argument("--no-forwarding", action="store_true",
                   help="skip bmv2's forwarding-only baseline")
    p.add_argument("--json", metavar="OUT", help="also write the result here")
    p.add_argument("--png", metavar="OUT", help="and a bar chart here")
    p.set_defaults(func=cmd_bench_target)
