"""`python -m dataplane workers`: many workers' agents in one process.

One `ina worker` process per Mininet host costs an interpreter with numpy (45-85 MB) and
seconds of imports each; at 200 workers that is 17 GB and minutes of start-up on 2 cores.
Here one process serves a list of hosts: for each it opens a raw socket inside the host's
network namespace (dataplane/netns.py: setns in a short-lived thread, so the socket lives in
the host's namespace while the process stays in its own) and drives the same `Worker` objects
`ina worker` runs, all from one event loop. Each host behaves on the wire as its own agent
would: its own socket, MAC, IP, flow ids, window, pacing and timers.

The hosts come as a JSON file (`--hosts`): a list of objects with `name`, `netns` (a path such
as /proc/PID/ns/net), `iface`, `ip`, `index`, `flow_id`, `next_node` and `ps_ip`; everything
else is shared and given as flags, as to `ina worker`. With --wait-go it prints one ready line
once every socket is open, waits for a line on stdin, and at the end prints one JSON report per
host (`ina worker`'s, with `name`); stopped by SIGTERM, one `stopped` line per unfinished host.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from dataplane import agents as one
from dataplane.frame import Endpoint, ip_bytes
from dataplane.gradients import fragments
from dataplane.netns import in_netns
from dataplane.ports import ina_frames, open_raw
from dataplane.state import PlanWatcher
from dataplane.worker import Worker, dispatch

HOST_FIELDS = ("name", "netns", "iface", "ip", "index", "flow_id", "next_node", "ps_ip")


class HostsFileError(ValueError):
    """The --hosts file is not a list of hosts with every field; the message says which."""


@dataclass
class StateCache:
    """The controller's state file parsed once per change for every worker of the process: each
    `PlanWatcher` otherwise re-reads and parses it on every publication (once a second), which
    for 200 workers was 200 parses a second of a file listing 200 workers."""

    path: Path
    _stamp: int = 0
    _state: dict | None = None

    def read(self) -> tuple[int, dict | None]:
        """(modification stamp, parsed state) as of now; the stamp is 0 when unreadable."""
        try:
            stamp = self.path.stat().st_mtime_ns
            if stamp != self._stamp:
                self._state, self._stamp = json.loads(self.path.read_text()), stamp
        except (OSError, json.JSONDecodeError):
            return 0, None
        return self._stamp, self._state


@dataclass
class SharedPlanWatcher(PlanWatcher):
    """`PlanWatcher` reading through a `StateCache` shared by the process's workers."""

    cache: StateCache = field(default_factory=lambda: StateCache(Path()))

    def poll(self, now: float) -> dict | None:
        if not self._due(now):
            return None
        stamp, state = self.cache.read()
        if not stamp or stamp == self._stamp or state is None:
            return None
        self._stamp = stamp
        return self._adopt(state)


@dataclass
class HostAgent:
    """One host's socket and the `Worker` shards sending its gradient over it."""

    name: str
    index: int
    sock: socket.socket
    shards: list[Worker]
    by_task: dict[tuple[int, int], Worker] = field(init=False)

    def __post_init__(self) -> None:
        self.by_task = {(w.task.job, w.task.task): w for w in self.shards}

    @property
    def finished(self) -> bool:
        return all(w.finished for w in self.shards)


def load_hosts(path: str | Path) -> list[dict]:
    """The hosts of a --hosts file, each checked for every field of HOST_FIELDS."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise HostsFileError(f"{path}: cannot read the hosts file ({exc})") from None
    if not isinstance(rows, list) or not rows:
        raise HostsFileError(f"{path}: the hosts file must be a non-empty JSON list of hosts")
    for i, row in enumerate(rows):
        missing = [f for f in HOST_FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise HostsFileError(f"{path}: host {i} lacks {', '.join(missing)}")
    return rows


def open_in_netns(netns: str, iface: str) -> tuple[socket.socket, bytes]:
    """A raw socket on `iface` inside namespace `netns` (a path), and the interface's MAC (the
    socket's own address: /sys/class/net shows the namespace that mounted sysfs, not the
    host's)."""
    sock = in_netns(netns, lambda: open_raw(iface))
    return sock, sock.getsockname()[4]


def host_agent(args: argparse.Namespace, row: dict, cache: StateCache | None) -> HostAgent:
    """Host `row`'s socket and Worker shards, built as `ina worker` builds its own."""
    own = argparse.Namespace(
        **{
            **vars(args),
            "name": row["name"],
            "index": row["index"],
            "flow_id": row["flow_id"],
            "next_node": row["next_node"],
            "ps_ip": row["ps_ip"],
            "gradient": None,
            "api": None,
        }
    )
    sock, mac = open_in_netns(row["netns"], row["iface"])
    rows = fragments(one._gradient(own, row["index"]))
    shards = one._worker_shards(own, sock, Endpoint(mac, ip_bytes(row["ip"])), rows)
    if cache is not None:
        for w in shards:
            if isinstance(w.plan, PlanWatcher):  # the state file's (no --api here)
                w.plan = SharedPlanWatcher(w.plan.path, w.plan.match, cache=cache)
    return HostAgent(row["name"], row["index"], sock, shards)


def run_hosts(agents: list[HostAgent], clock=time.monotonic) -> None:
    """Send every host's gradient at once, as `dataplane.worker.run_shards` does for one:
    one loop pumps each unfinished host's shards, waits on all their sockets together, hands
    each received frame to the host whose socket it came in on, and checks every timer."""
    start = clock()
    for agent in agents:
        for w in agent.shards:
            w.start(start)
    active = {agent.sock.fileno(): agent for agent in agents if not agent.finished}
    poller = select.epoll()
    for fd in active:
        poller.register(fd, select.EPOLLIN)
    try:
        while active:
            now = clock()
            wait = min(w.pump(now) for agent in active.values() for w in agent.shards)
            ready = poller.poll(max(0.0, wait))
            now = clock()
            for fd, _ in ready:
                agent = active[fd]
                for frame in ina_frames(agent.sock):
                    dispatch(agent.shards, agent.by_task, frame, now)
            for fd, agent in list(active.items()):
                for w in agent.shards:
                    w.on_timeouts(clock())
                if agent.finished:
                    poller.unregister(fd)
                    del active[fd]
    finally:
        poller.close()
    for agent in agents:
        for w in agent.shards:
            w.stats.fragments = len(w.rows)


@cache
def _expected(seed: int, workers: int, elements: int) -> np.ndarray:
    """The exact sum, computed once per process for all its hosts."""
    return one._expected_sum(seed, workers, elements)


def report(args: argparse.Namespace, agent: HostAgent) -> dict:
    """`ina worker`'s report for one host, with its name (and `exact` with --verify)."""
    out: dict[str, object] = {
        "worker": agent.index,
        "name": agent.name,
        **one._worker_report(agent.shards),
    }
    if args.verify:
        elements = int(args.size_mb * 2**20) // 4
        result = np.concatenate([w.result for w in agent.shards]).reshape(-1)[:elements]
        out["exact"] = bool(
            np.array_equal(result.astype(np.int64), _expected(args.seed, args.workers, elements))
        )
    return out


def cmd_workers(args: argparse.Namespace) -> int:
    try:
        rows = load_hosts(args.hosts)
        cache = StateCache(Path(args.state)) if args.state else None
        agents = [host_agent(args, row, cache) for row in rows]
    except (HostsFileError, one.BadShards) as exc:
        print(f"error: workers: {exc}", file=sys.stderr)
        return 2
    one._stop_on_sigterm()
    try:
        one._wait_for_go(args)
        run_hosts(agents)
    except one.Stopped:
        for agent in agents:
            if not agent.finished:
                waiting = {w.task.task: w.waiting_for() for w in agent.shards}
                print(
                    json.dumps(
                        {
                            "worker": agent.index,
                            "name": agent.name,
                            "stopped": waiting
                            if len(waiting) > 1
                            else next(iter(waiting.values())),
                            **one._worker_report(agent.shards),
                        }
                    )
                )
        return 3
    reports = [report(args, agent) for agent in agents]
    for line in reports:
        print(json.dumps(line))
    return 0 if all(r.get("exact", True) for r in reports) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `workers` (several hosts' workers in one process) to the command line."""
    p = subparsers.add_parser("workers", help="several hosts' workers in one process (Mininet)")
    p.add_argument(
        "--hosts",
        required=True,
        metavar="FILE.json",
        help="the hosts to serve: a JSON list of objects with " + ", ".join(HOST_FIELDS),
    )
    p.add_argument(
        "--state", metavar="FILE", help="the controller's state file: follow plan changes (README)"
    )
    p.add_argument("--job", type=int, default=1, help="job number (default 1)")
    p.add_argument("--task", type=int, default=0, help="task number within the job (default 0)")
    p.add_argument("--workers", type=int, required=True, help="workers in the task")
    p.add_argument("--size-mb", type=float, default=1.0, help="gradient size (default 1 MB)")
    p.add_argument("--epoch", type=int, default=0, help="iteration number")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic gradients")
    p.add_argument(
        "--wait-go",
        action="store_true",
        help='print {"ready": true} once set up, then wait for a line on stdin',
    )
    one.sending_options(p)
    p.add_argument(
        "--verify", action="store_true", help="check each host's result against the exact sum"
    )
    p.set_defaults(func=cmd_workers)
