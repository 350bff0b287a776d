"""The worker library of a training process: `Session.open(...)` once, then
`session.allreduce(gradient, op="sum" | "mean")` once per step (docs/allreduce.md).

Each call sums a float32 array of any shape over the task's workers through the switches, in
three all-reduce rounds of int32 (dataplane/quantize.py: the exponent, the per-block bounds,
the payload), so that no switch's int32 sum ever overflows and each element's error is bounded
(`last_bound`). Every round is a `Worker` transfer (dataplane/worker.py: AIMD window, CONTROL,
loss recovery) whose fragment ids carry the step as their epoch (wrapping at EPOCHS) and the
round as their place: [exponent | bounds | payload]. The session follows re-plans (the state
file or the API, as the agents do) and keeps its round-trip estimate across rounds and steps.
A step in which no result comes for `timeout` seconds raises PeerMissing: a worker (or the PS)
is gone; nothing waits forever. The PS side is `ina ps --session` (dataplane/session_ps.py).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataplane.frame import BROADCAST, Endpoint, K, Task, ip_bytes
from dataplane.gradients import fragments, segment_rows, shard_ranges
from dataplane.netns import in_netns
from dataplane.plan_api import ApiError, ApiWatcher, wait_for_job
from dataplane.ports import open_raw
from dataplane.quantize import (
    BUCKETS,
    Scales,
    block_bounds,
    blocks,
    check_finite,
    exponent_vector,
    sizes_agree,
    to_float32,
    top_exponent,
)
from dataplane.rto import RtoEstimator
from dataplane.state import PlanSource, PlanWatcher, rows_shares
from dataplane.worker import Stalled, Worker, run_shards

OPS = ("sum", "mean")
EXPONENT_ROWS = -(-(BUCKETS + 1) // K)  # fragments of the exponent round


class SessionError(ValueError):
    """The session cannot be opened or used as asked; the message says why."""


class PeerMissing(TimeoutError):
    """No result came for `timeout` seconds: a peer worker or the PS stopped. The session is
    over (its peers may be a step apart); open a new one to go on."""

    def __init__(self, message: str, step: int, round_name: str, missing: list[int], peers):
        super().__init__(message)
        self.step, self.round, self.missing, self.peers = step, round_name, missing, peers


@dataclass
class _Route:
    """One task this worker sends to (several with model sharding): its ids, as the latest
    plan version gives them, and the round-trip estimate of its path."""

    task: Task
    ps: Endpoint
    row: dict[str, Any]
    contributor: int
    plan: PlanSource | None = None
    rtt: RtoEstimator | None = None
    own_rtt: RtoEstimator | None = None


@dataclass
class _Follow:
    """A route's plan source for one Worker: what it polls becomes the route's row, so the
    next round starts on the newest ids."""

    route: _Route
    version: int = 0

    def poll(self, now: float) -> dict | None:
        plan = self.route.plan
        row = plan.poll(now) if plan else None
        if plan is not None:
            self.version = plan.version
        if row is not None:
            self.route.row = row
        return row


@dataclass
class Session:
    """One worker's all-reduce session over INA; `open` builds one from the controller's
    state file, its API or explicit ids."""

    sock: socket.socket
    me: Endpoint
    routes: list[_Route]
    workers: int
    peers: list[str] = field(default_factory=list)
    shares: list[float] | None = None
    timeout: float = 30.0
    window: float = 16.0
    rto: float = 0.5
    rate_scale: float = 1.0
    paced: bool = False
    step: int = 0
    # Per element of the last result, the most it can differ from the exact sum (or mean) of
    # the workers' float32 inputs: the quantization's N 2**-(k+1) per block, plus float32
    # rounding of the result.
    last_bound: np.ndarray | None = None
    # Called after every int32 round with its name, what this worker sent and the sum that
    # came back: a caller can check each sum against every worker's values, bit for bit.
    on_round: Callable[[str, np.ndarray, np.ndarray], None] | None = None
    _failed: str | None = None

    @classmethod
    def open(
        cls,
        *,
        iface: str,
        ip: str,
        name: str | None = None,
        state: str | Path | None = None,
        api: str | None = None,
        job: int | None = None,
        job_name: str | None = None,
        task: int | None = None,
        api_ca: str | None = None,
        api_wait: float = 600.0,
        ps_ip: str | None = None,
        index: int | None = None,
        workers: int | None = None,
        flow_id: int | None = None,
        next_node: int = 0,
        netns: str | None = None,
        timeout: float = 30.0,
        window: float = 16.0,
        rto: float = 0.5,
        rate_scale: float = 1.0,
    ) -> Session:
        """Open a session on interface `iface` (address `ip`; inside network namespace
        `netns` if given) for one job: with `state` (the controller's state file) or `api`
        (its URL, `job` or `job_name`), this worker is host `name` there and its ids come
        from the plan, which the session follows; without either, from `ps_ip`, `index`,
        `workers` (`flow_id`, `next_node`, `job`, `task`). `timeout`: seconds without a
        result before PeerMissing."""
        if timeout <= 0 or window < 1 or rto <= 0:
            raise SessionError("timeout and rto must be > 0 and window >= 1")
        if state is not None and api is not None:
            raise SessionError("state and api are two sources of one plan; give one")
        if state is not None or api is not None:
            if not name:
                raise SessionError("with state or api, name (this worker's host) is needed")
            routes, rows, job_id = _planned_routes(
                name, state, api, job, job_name, task, api_ca, api_wait
            )
            shares = rows_shares(rows, job_id)
            task_rows = [r for r in rows if r["job_id"] == job_id]
            count = routes[0].row["workers_in_task"]
            peers = sorted({r["worker"] for r in task_rows} - {name})
            paced = True
        else:
            given = {"ps_ip": ps_ip, "index": index, "workers": workers}
            missing = [n for n, v in given.items() if v is None]
            if missing:
                raise SessionError(
                    f"{', '.join(missing)} needed (or state=FILE / api=URL to take them from "
                    "the controller)"
                )
            assert ps_ip is not None and index is not None and workers is not None
            row = {"flow_id": flow_id or index + 1, "next_node": next_node, "segments": []}
            ids = Task(1 if job is None else job, 0 if task is None else task)
            routes = [_Route(ids, _ps(ps_ip), row, index)]
            shares, count, paced = None, workers, False
            peers = [f"worker {i}" for i in range(workers) if i != index]
        sock, me = _open_interface(iface, ip, netns)
        return cls(
            sock,
            me,
            routes,
            count,
            peers=peers,
            shares=list(shares.values()) if shares else None,
            timeout=timeout,
            window=window,
            rto=rto,
            rate_scale=rate_scale,
            paced=paced,
        )

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()
        self._failed = self._failed or "closed"

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """The sum (or mean) of `array` over the task's workers: float32, same shape. Every
        worker calls it once per step with an array of the same shape."""
        if self._failed:
            raise SessionError(f"this session is over ({self._failed}); open a new one")
        if op not in OPS:
            raise SessionError(f"op must be one of {', '.join(OPS)}, not {op!r}")
        if not isinstance(array, np.ndarray) or array.dtype != np.float32:
            kind = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
            raise TypeError(f"allreduce takes a float32 NumPy array, not {kind}")
        check_finite(array)
        flat = array.reshape(-1)
        try:
            summed = self._reduce(flat)
        finally:
            self.step += 1
        if op == "mean":
            summed /= self.workers
            assert self.last_bound is not None
            self.last_bound /= self.workers
        result = to_float32(summed, array.shape, op)
        assert self.last_bound is not None
        self.last_bound = self.last_bound.reshape(array.shape) + _half_ulp(result)
        return result

    def _reduce(self, flat: np.ndarray) -> np.ndarray:
        """The three rounds; the float64 sum of the dequantized payload (flat)."""
        n = self.workers
        exponents = self._exchange(exponent_vector(flat, n), 0, "exponent")
        if not sizes_agree(exponents, len(flat), n):
            self._failed = "the workers' arrays differ in size"
            raise SessionError(
                f"allreduce step {self.step}: the workers' arrays differ in size (this "
                f"worker's has {len(flat)} elements); every worker must pass the same shape"
            )
        top = top_exponent(exponents)
        if top is None or len(flat) == 0:  # every worker's array is zeros
            self.last_bound = np.zeros(len(flat))
            return np.zeros(len(flat))
        rows = blocks(flat)
        bounds = self._exchange(block_bounds(rows, top, n), EXPONENT_ROWS, "bound")
        scales = Scales.from_bounds(bounds, top, n)
        payload_at = EXPONENT_ROWS + -(-len(rows) // K)
        summed = self._exchange(scales.quantize(rows).reshape(-1), payload_at, "payload")
        self.last_bound = np.repeat(scales.bound(), K)[: len(flat)]
        return scales.dequantize(summed.reshape(-1, K)).reshape(-1)[: len(flat)]

    def _exchange(self, values: np.ndarray, offset: int, round_name: str) -> np.ndarray:
        """One all-reduce of int32 `values` through the switches, its fragments from wire
        index `offset` on."""
        rows = fragments(values)
        shards = self._workers(rows, offset)
        try:
            result = run_shards(shards, stall_after=self.timeout)
        except Stalled as exc:
            missing = [int(w.offset + i) for w in exc.shards for i in np.flatnonzero(~w.have)]
            self._failed = f"step {self.step} stalled"
            ps = ", ".join(".".join(map(str, r.ps.ip)) for r in self.routes)
            raise PeerMissing(
                f"allreduce step {self.step}: no result for {self.timeout:g} s in its "
                f"{round_name} round ({len(missing)} of {len(rows)} fragments missing, "
                f"first {missing[:5]}): one of the other workers ({', '.join(self.peers)}) "
                f"or the PS ({ps}) stopped sending",
                self.step,
                round_name,
                missing,
                self.peers,
            ) from None
        finally:
            for route, w in zip(self.routes, shards, strict=True):
                route.rtt, route.own_rtt = w.rtt, w.own_rtt
            self.window = max(1.0, min(w.window for w in shards))
        summed = result[: len(values)]
        if self.on_round is not None:
            self.on_round(round_name, values, summed)
        return summed

    def _workers(self, rows: np.ndarray, offset: int) -> list[Worker]:
        ranges = shard_ranges(len(rows), self.shares) if self.shares else [(0, len(rows))]
        shards = []
        for route, (lo, hi) in zip(self.routes, ranges, strict=True):
            part = rows[lo:hi]
            row = route.row
            w = Worker(
                self.sock,
                self.me,
                route.ps,
                route.task,
                row["flow_id"],
                row["next_node"],
                part,
                window=self.window,
                timeout=self.rto,
                rate_gbps=row["rate_gbps"] * self.rate_scale if self.paced else None,
                plan=_Follow(route, route.plan.version if route.plan else 0),
                rate_scale=self.rate_scale,
                contributor=route.contributor,
                epoch=self.step,
                offset=offset + lo,
                segments=segment_rows(len(part), row.get("segments") or []),
            )
            if route.rtt is not None and route.own_rtt is not None:
                w.rtt, w.own_rtt = route.rtt, route.own_rtt
            shards.append(w)
        return shards


def _half_ulp(values: np.ndarray) -> np.ndarray:
    """Half a float32 ulp at each value: the most rounding to float32 moved it."""
    return np.spacing(np.abs(values).astype(np.float32)).astype(np.float64) / 2


def _ps(ip: str) -> Endpoint:
    return Endpoint(BROADCAST.mac, ip_bytes(ip))


def _open_interface(iface: str, ip: str, netns: str | None) -> tuple[socket.socket, Endpoint]:
    """A raw socket on `iface` and this end's addresses (the MAC as the socket sees it, so
    it works inside a namespace whose /sys is not ours)."""

    def open_it() -> socket.socket:
        try:
            return open_raw(iface)
        except PermissionError:
            raise SessionError(f"opening {iface} needs root (CAP_NET_RAW)") from None
        except OSError as exc:
            raise SessionError(f"cannot open network interface {iface!r}: {exc}") from None

    try:
        address = ip_bytes(ip)
        if len(address) != 4 or not all(0 <= b <= 255 for b in address):
            raise ValueError
    except ValueError:
        raise SessionError(f"ip {ip!r} is not an IPv4 address") from None
    sock = in_netns(netns, open_it) if netns else open_it()
    return sock, Endpoint(sock.getsockname()[4], address)


def _planned_routes(
    name: str,
    state: str | Path | None,
    api: str | None,
    job: int | None,
    job_name: str | None,
    task: int | None,
    api_ca: str | None,
    api_wait: float,
) -> tuple[list[_Route], list[dict], int]:
    """This worker's routes, the job's rows and its id, from the state file or the API."""
    if api is not None:
        if (job is None) == (job_name is None):
            raise SessionError("with api, give job (its id) or job_name, one of them")
        which: int | str | None = job_name if job_name is not None else job
        assert which is not None
        try:
            answer = wait_for_job(api, which, wait=api_wait, ca=api_ca)
        except ApiError as exc:
            raise SessionError(str(exc)) from None
        rows, job_id, version = answer["workers"], answer["job_id"], answer["version"]
    else:
        assert state is not None
        if job_name is not None:
            raise SessionError("job_name needs api; with state, give job (its id)")
        try:
            doc = json.loads(Path(state).read_text())
            rows, version = doc["workers"], doc["version"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SessionError(f"state file {state}: not readable ({exc})") from None
        jobs = sorted({r["job_id"] for r in rows})
        if job is None and len(jobs) != 1:
            raise SessionError(f"state file {state} holds jobs {jobs}: give job")
        job_id = jobs[0] if job is None else job
    mine = {r["task_id"]: r for r in rows if r["job_id"] == job_id and r["worker"] == name}
    if not mine:
        workers = sorted({r["worker"] for r in rows if r["job_id"] == job_id})
        raise SessionError(f"job {job_id} has no worker {name} (its workers: {workers})")
    shares = rows_shares(rows, job_id)
    if shares:
        if set(mine) != set(shares):
            raise SessionError(
                f"job {job_id} shards its model over tasks {sorted(shares)} but {name} is in "
                f"tasks {sorted(mine)}; with sharding every worker is in every task"
            )
        tasks = list(shares)
    elif task is not None:
        if task not in mine:
            raise SessionError(f"{name} is not in task {task} of job {job_id}")
        tasks = [task]
    else:
        tasks = [min(mine)]
    routes = []
    for t in tasks:
        row = mine[t]
        order = [r["worker"] for r in rows if r["job_id"] == job_id and r["task_id"] == t]
        key = (name, job_id, t)

        def match(r: dict, key: tuple = key) -> bool:
            return (r["worker"], r["job_id"], r["task_id"]) == key

        plan: PlanSource
        if api is not None:
            plan = ApiWatcher(api, job_id, match, api_ca)
        else:
            plan = PlanWatcher(Path(str(state)), match)
        plan.version = version
        routes.append(_Route(Task(job_id, t), _ps(row["ps_ip"]), row, order.index(name), plan))
    return routes, rows, job_id
