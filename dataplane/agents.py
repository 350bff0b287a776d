"""Host agents on the command line: `ina worker` sends a gradient in fragments and gets the
sum back (dataplane/worker.py, its loss recovery dataplane/recovery.py), `ina ps` finishes the
sums and returns them (dataplane/ps.py). Both take their ids and follow the plan from the
controller's state file (dataplane/state.py) or, by job id, from its API (`--api URL --job ID`,
dataplane/plan_api.py: they wait until the job is installed), and cut the gradient the same
way (dataplane/gradients.py).

Every frame's UDP source port is its flow id (`build_frame`), so plain OpenFlow switches that
cannot parse INA still forward each flow on its planned path by matching `udp_src`.

With model sharding each PS finishes only its own shard and with --verify checks it against the
exact sum. Stopped by SIGTERM before the end, either agent prints a JSON line with `stopped`:
what it still waits for (the Mininet runner's hang report names it).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dataplane.frame import BROADCAST, Endpoint, K, Task, ip_bytes, mac_bytes
from dataplane.gradients import (
    FIXED_POINT_SCALE,
    fragments,
    shard_ranges,
    synthetic_gradient,
    to_fixed_point,
)
from dataplane.plan_api import ApiError, ApiWatcher, CounterReporter, wait_for_job
from dataplane.ports import open_raw
from dataplane.ps import ParameterServer
from dataplane.session_ps import SessionPS
from dataplane.state import PlanWatcher, job_shares, rows_shares
from dataplane.worker import Worker, run_shards


class Stopped(Exception):
    """SIGTERM arrived before the agent finished: it reports what it was waiting for."""


def _stop_on_sigterm() -> None:
    def stop(signum, frame):
        raise Stopped

    signal.signal(signal.SIGTERM, stop)


def _gradient(args: argparse.Namespace, index: int) -> np.ndarray:
    if args.gradient:
        return to_fixed_point(np.load(args.gradient))
    return synthetic_gradient(args.seed, index, int(args.size_mb * 2**20) // 4)


def _wait_for_go(args: argparse.Namespace) -> None:
    """With --wait-go: say we are ready (socket open, gradient built), then block until a line
    arrives on stdin. A launcher starts every agent this way, then releases them together, so
    process start-up (seconds of imports on a loaded machine) is neither timed nor lets one
    worker's fragments wait in switch slots for peers that have not started yet."""
    if args.wait_go:
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()


class BadShards(Exception):
    """The state file shards a job in a way this agent cannot follow; the message says why."""


class BadConfig(Exception):
    """The options, or the controller's rows for the job, leave the agent without its ids;
    the message says what is missing."""


# Per role: the options that --api fills in from the job's rows, else needed by hand.
FROM_API = {"worker": ("ps_ip", "index", "workers"), "ps": ("result_flow_id", "workers")}


def configure(args: argparse.Namespace, role: str) -> list[dict] | None:
    """With --api: wait until the controller has installed job --job (or --job-name), take
    this agent's ids from its rows into `args`, and return the rows; without it, check the
    options given."""
    if not args.api:
        if args.job_name:
            raise BadConfig(f"ina {role}: --job-name needs --api URL")
        args.job = 1 if args.job is None else args.job
        missing = [f"--{n.replace('_', '-')}" for n in FROM_API[role] if getattr(args, n) is None]
        if missing:
            raise BadConfig(
                f"ina {role}: {', '.join(missing)} needed (or --api URL and --job "
                "ID to take them from the controller)"
            )
        return None
    if args.state:
        raise BadConfig(f"ina {role}: --api and --state are two sources of one plan; give one")
    if args.job_name and args.job is not None:
        raise BadConfig(f"ina {role}: --job and --job-name name one job two ways; give one")
    if not args.job_name and args.job is None:
        raise BadConfig(
            f"ina {role} --api needs --job ID (the id the controller gave the "
            "job) or --job-name NAME (the name it was submitted with)"
        )
    if role == "worker" and not args.name:
        raise BadConfig("ina worker --api needs --name (this worker's host in the topology)")
    answer = wait_for_job(args.api, args.job_name or args.job, wait=args.api_wait, ca=args.api_ca)
    args.job, rows = answer["job_id"], answer["workers"]
    if role == "worker":
        mine = [r for r in rows if r["worker"] == args.name]
        if not mine:
            raise BadConfig(
                f"job {args.job} has no worker {args.name} (its workers: "
                f"{', '.join(sorted({r['worker'] for r in rows}))})"
            )
        row = next((r for r in mine if r["task_id"] == args.task), mine[0])
        task = [r["worker"] for r in rows if r["task_id"] == row["task_id"]]
        args.task, args.ps_ip, args.index = row["task_id"], row["ps_ip"], task.index(args.name)
        args.flow_id, args.next_node = row["flow_id"], row["next_node"]
        args.workers = row["workers_in_task"]
    else:
        task = [r for r in rows if r["task_id"] == args.task]
        if not task:
            raise BadConfig(
                f"job {args.job} has no task {args.task} (its tasks: "
                f"{sorted({r['task_id'] for r in rows})})"
            )
        args.workers, args.result_flow_id = task[0]["workers_in_task"], task[0]["result_flow_id"]
        args.ps_host = task[0]["ps"]
    return rows


def worker_counts(shards: list[Worker]) -> dict:
    """A worker's counters as the API's `AgentReport` takes them (its shards summed)."""
    stats = [w.stats for w in shards]
    return {
        "sent": sum(s.sent for s in stats),
        "aggregations": sum(w.done for w in shards),
        "collisions": sum(s.controls for s in stats),
        "losses": {
            "timed_out": sum(s.timed_out for s in stats),
            "detected": sum(s.detected_lost for s in stats),
            "spurious": sum(s.spurious for s in stats),
        },
        "resends": {
            "control": sum(s.resent_on_control for s in stats),
            "timeout": sum(s.resent_on_timeout for s in stats),
            "loss": sum(s.resent_on_loss for s in stats),
            "unblock": sum(s.sent_to_unblock for s in stats),
        },
    }


def ps_counts(ps: ParameterServer) -> dict:
    """A PS's counters as the API's `AgentReport` takes them."""
    results, finished = ps.results_sent, ps.finished
    return {
        "sent": results,
        "aggregations": finished,
        "duplicates": ps.duplicates_ignored,
        "resends": {"result": max(0, results - finished)},
    }


def reporter(
    args: argparse.Namespace, role: str, host: str, counts: Callable[[], dict]
) -> CounterReporter | None:
    """With --api: the thread that reports this agent's counters to the controller."""
    if not args.api:
        return None
    identity = {"role": role, "host": host, "task": args.task, "run": uuid.uuid4().hex}
    return CounterReporter(
        args.api,
        args.job,
        lambda: {**identity, **counts()},
        token=args.api_token,
        ca=args.api_ca,
    )


def _api_token(args: argparse.Namespace) -> None:
    """--api-token-file read into `args.api_token`; BadConfig if it cannot be."""
    args.api_token = None
    if args.api_token_file is None:
        return
    if not args.api:
        raise BadConfig("--api-token-file goes with --api URL")
    try:
        args.api_token = Path(args.api_token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadConfig(f"--api-token-file {args.api_token_file}: cannot read it ({exc})") from None


def _watcher(args: argparse.Namespace, match) -> PlanWatcher | ApiWatcher | None:
    """What follows the plan for this agent: the API's rows, the state file, or nothing."""
    if args.api:
        return ApiWatcher(args.api, args.job, match, args.api_ca)
    if args.state:
        return PlanWatcher(Path(args.state), match)
    return None


def _shares(args: argparse.Namespace, published: list[dict] | None) -> dict[int, float] | None:
    if published is not None:
        return rows_shares(published, args.job)
    return job_shares(args.state, args.job)


def _endpoint(iface: str, ip: str) -> Endpoint:
    mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
    return Endpoint(mac_bytes(mac), ip_bytes(ip))


def _worker_shards(
    args: argparse.Namespace,
    sock: socket.socket,
    me: Endpoint,
    rows: np.ndarray,
    published: list[dict] | None = None,
) -> list[Worker]:
    """One Worker per task this worker sends to: the whole gradient to --task's PS, or, when
    the state file (or the API's `published` rows) gives the job's tasks model shares, each
    task's shard to its PS."""
    common = {
        "window": args.window,
        "timeout": args.timeout,
        "rate_scale": args.rate_scale,
        "epoch": args.epoch,
        "mark_depth": args.mark_depth,
        "query": args.loss_query,
        "peers": args.workers or 0,
    }

    def watcher(task: int) -> PlanWatcher | ApiWatcher | None:
        key = (args.name, args.job, task)
        return _watcher(args, lambda r: (r["worker"], r["job_id"], r["task_id"]) == key)

    shares = _shares(args, published)
    if shares is None:
        return [
            Worker(
                sock,
                me,
                Endpoint(BROADCAST.mac, ip_bytes(args.ps_ip)),
                Task(args.job, args.task),
                args.flow_id or args.index + 1,
                args.next_node,
                rows,
                rate_gbps=args.rate_gbps,
                plan=watcher(args.task),
                contributor=args.index,
                **common,
            )
        ]
    if published is None:
        published = json.loads(Path(args.state).read_text())["workers"]
    mine = {
        r["task_id"]: r for r in published if r["job_id"] == args.job and r["worker"] == args.name
    }
    if set(mine) != set(shares):
        raise BadShards(
            f"worker {args.name}: job {args.job} shards its model over tasks {sorted(shares)} "
            f"but this worker is in tasks {sorted(mine)} of it; with model sharding every "
            "worker holds the whole model and sends one shard to each task's PS"
        )
    ranges = shard_ranges(len(rows), list(shares.values()))
    return [
        Worker(
            sock,
            me,
            Endpoint(BROADCAST.mac, ip_bytes(mine[task]["ps_ip"])),
            Task(args.job, task),
            mine[task]["flow_id"],
            mine[task]["next_node"],
            rows[lo:hi],
            plan=watcher(task),
            offset=lo,
            contributor=args.index,
            **common,
        )
        for task, (lo, hi) in zip(shares, ranges, strict=True)
    ]


def _worker_report(shards: list[Worker]) -> dict[str, object]:
    """The shards' stats summed (seconds: the last shard's); per shard its task and range;
    the round trip estimate the retransmission timeout came to (the longest shard's)."""
    report: dict[str, object] = {}
    for w in shards:
        for key, value in w.stats.__dict__.items():
            report[key] = (
                max(report.get(key, 0), value) if key == "seconds" else report.get(key, 0) + value
            )
    slowest = max(shards, key=lambda w: w.rto)
    report.update(
        rtt_samples=sum(w.rtt.samples for w in shards),
        srtt_ms=round(1000 * (slowest.rtt.srtt or 0.0), 1),
        rto_ms=round(1000 * slowest.rto, 1),
    )
    if len(shards) > 1:
        report["shards"] = [
            {
                "task": w.task.task,
                "first_fragment": w.offset,
                "fragments": len(w.rows),
                "seconds": round(w.stats.seconds, 3),
            }
            for w in shards
        ]
    return report


def cmd_worker(args: argparse.Namespace) -> int:
    if args.verify and args.gradient:
        raise SystemExit("--verify checks synthetic gradients; it cannot be used with --gradient")
    try:
        _api_token(args)
        published = configure(args, "worker")
    except (BadConfig, ApiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    gradient = _gradient(args, args.index)
    try:
        shards = _worker_shards(
            args,
            open_raw(args.iface),
            _endpoint(args.iface, args.ip),
            fragments(gradient),
            published,
        )
    except BadShards as exc:
        print(f"error: ina worker: {exc}", file=sys.stderr)
        return 2
    _stop_on_sigterm()
    counting = reporter(args, "worker", args.name, lambda: worker_counts(shards))
    try:
        _wait_for_go(args)
        result = run_shards(shards)[: len(gradient)]
    except Stopped:
        waiting = {w.task.task: w.waiting_for() for w in shards}
        print(
            json.dumps(
                {
                    "worker": args.index,
                    "stopped": waiting if len(shards) > 1 else waiting[args.task],
                    **_worker_report(shards),
                }
            )
        )
        return 3
    finally:
        if counting is not None:
            counting.close()
    report: dict[str, object] = {"worker": args.index, **_worker_report(shards)}
    code = 0
    if args.verify:
        expected = _expected_sum(args.seed, args.workers, len(gradient))
        report["exact"] = bool(np.array_equal(result.astype(np.int64), expected))
        code = 0 if report["exact"] else 1
    print(json.dumps(report))
    return code


def _expected_sum(seed: int, workers: int, elements: int) -> np.ndarray:
    """The exact sum of the synthetic gradients of workers 0..workers-1 (int64)."""
    return sum(
        (synthetic_gradient(seed, i, elements).astype(np.int64) for i in range(workers)),
        np.zeros(elements, np.int64),
    )


def _ps_shard(
    args: argparse.Namespace, total: int, published: list[dict] | None = None
) -> tuple[int, int]:
    """(first fragment, fragments) this PS finishes: its task's shard, or the whole gradient."""
    shares = _shares(args, published)
    if shares is None:
        return 0, total
    if args.task not in shares:
        raise BadShards(
            f"PS of task {args.task}: the state file shards job {args.job} over "
            f"tasks {sorted(shares)} only"
        )
    lo, hi = shard_ranges(total, list(shares.values()))[list(shares).index(args.task)]
    return lo, hi - lo


def cmd_ps(args: argparse.Namespace) -> int:
    if args.session:
        return _session_ps(args)
    elements = int(args.size_mb * 2**20) // 4
    try:
        _api_token(args)
        published = configure(args, "ps")
        offset, count = _ps_shard(args, -(-elements // K), published)
    except (BadConfig, ApiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BadShards as exc:
        print(f"error: ina ps: {exc}", file=sys.stderr)
        return 2
    task = (args.job, args.task)
    plan = _watcher(args, lambda r: (r["job_id"], r["task_id"]) == task)
    ps = ParameterServer(
        open_raw(args.iface),
        _endpoint(args.iface, args.ip),
        Task(args.job, args.task),
        args.workers,
        count,
        args.result_flow_id,
        plan=plan,
        epoch=args.epoch,
        offset=offset,
    )
    _stop_on_sigterm()
    counting = reporter(args, "ps", getattr(args, "ps_host", ""), lambda: ps_counts(ps))
    try:
        _wait_for_go(args)
        start = time.monotonic()
        ps.run(args.linger, stop=sys.stdin if args.wait_go else None)
    except Stopped:
        # stopped while still answering stragglers, its shard may well be complete
        print(
            json.dumps(
                {
                    "ps": True,
                    "stopped": ps.waiting_for(),
                    "fragments": ps.fragments,
                    "flows_per_fragment": ps.flows_per_fragment(),
                    **_ps_check(args, ps, elements),
                }
            )
        )
        return 3
    finally:
        if counting is not None:
            counting.close()
    report = {
        "ps": True,
        "first_fragment": offset,
        "fragments": ps.fragments,
        "finished": ps.finished,
        "duplicates_ignored": ps.duplicates_ignored,
        "miscounted": ps.miscounted,
        "results_sent": ps.results_sent,
        "queries_quiet": ps.queries_quiet,
        "flows_per_fragment": ps.flows_per_fragment(),
        "seconds": round(time.monotonic() - start, 3),
        **_ps_check(args, ps, elements),
    }
    print(json.dumps(report))
    return 0 if report.get("exact", True) else 1


def _session_ps(args: argparse.Namespace) -> int:
    """`ina ps --session`: serve every step of a training run until stopped (SIGTERM, or a
    second line on stdin with --wait-go), then print what it served."""
    try:
        if args.verify:
            raise BadConfig("ina ps --session: --verify checks one synthetic iteration; drop it")
        configure(args, "ps")
    except (BadConfig, ApiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    task = (args.job, args.task)
    ps = SessionPS(
        open_raw(args.iface),
        _endpoint(args.iface, args.ip),
        Task(args.job, args.task),
        args.workers,
        args.result_flow_id,
        plan=_watcher(args, lambda r: (r["job_id"], r["task_id"]) == task),
    )
    _stop_on_sigterm()
    try:
        _wait_for_go(args)
        ps.run(stop=sys.stdin if args.wait_go else None)
    except Stopped:
        pass
    print(json.dumps(ps.report()))
    return 0 if ps.miscounted == 0 else 1


def _ps_check(args: argparse.Namespace, ps: ParameterServer, elements: int) -> dict:
    """With --verify and every fragment finished: is the PS's shard the exact sum?"""
    if not args.verify or ps.finished < ps.fragments:
        return {}
    expected = fragments(_expected_sum(args.seed, args.workers, elements))[ps.offset :]
    return {"exact": bool(np.array_equal(ps.result.astype(np.int64), expected[: ps.fragments]))}


def sending_options(p: argparse.ArgumentParser) -> None:
    """How a worker sends: its window, retransmission timeout and pacing (`ina worker` and
    the many-hosts agent)."""
    p.add_argument("--window", type=float, default=16, help="initial window (fragments)")
    p.add_argument("--timeout", type=float, default=0.5, help="retransmission timeout (s)")
    p.add_argument("--rate-gbps", type=float, help="pace at the task's published rate")
    p.add_argument(
        "--rate-scale",
        type=float,
        default=1.0,
        help="wire Gbps per planned Gbps when pacing at the state file's rate",
    )
    p.add_argument(
        "--mark-depth",
        type=_depth,
        metavar="N",
        help="mark DATA congested from N frames waiting in this host's own egress queue "
        "(default: half of what that queue holds; p4src/README.md, Congestion mark)",
    )
    p.add_argument(
        "--loss-query",
        action="store_true",
        help="ask the switches whose loss a fragment found lost is before resending it "
        "(both targets answer loss queries; p4src/README.md, PROBE)",
    )


def _depth(text: str) -> int:
    """argparse type of --mark-depth: a count of frames, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of frames (0 or more)")
    return int(text)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state", metavar="FILE", help="the controller's state file: follow plan changes (README)"
    )
    p.add_argument(
        "--api",
        metavar="URL",
        help="the controller's API (http[s]://HOST:PORT): take this agent's ids for "
        "job --job from it, waiting until the job is installed, and follow "
        "its plan changes (instead of --state)",
    )
    p.add_argument(
        "--job-name",
        metavar="NAME",
        help="with --api, the job submitted under this name, whatever its id (instead of --job)",
    )
    p.add_argument("--api-ca", metavar="PEM", help="the CA of the API's certificate (https)")
    p.add_argument(
        "--api-token-file",
        metavar="FILE",
        help="with --api, the controller's bearer token: this agent's counters go to "
        "POST /jobs/{id}/counters every second and at exit (needed when the API has a token)",
    )
    p.add_argument(
        "--api-wait",
        type=float,
        default=600.0,
        metavar="S",
        help="with --api, seconds to wait for the job to be installed (default 600)",
    )
    p.add_argument("--iface", required=True, help="interface to send and receive on")
    p.add_argument("--ip", required=True, help="this host's IPv4 address")
    p.add_argument(
        "--job",
        type=int,
        help="job number, carried in every fragment (default 1); with --api, the "
        "job id the controller gave the job",
    )
    p.add_argument(
        "--task",
        type=int,
        default=0,
        help="task number within the job, carried in every fragment (default 0)",
    )
    p.add_argument("--workers", type=int, help="workers in the task (with --api: from it)")
    p.add_argument("--size-mb", type=float, default=1.0, help="gradient size (default 1 MB)")
    p.add_argument(
        "--epoch",
        type=int,
        default=0,
        help="iteration number, carried in fragment ids (worker and PS must agree)",
    )
    p.add_argument(
        "--wait-go",
        action="store_true",
        help='print {"ready": true} once set up, then wait for a line on stdin',
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic gradients")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `worker` and `ps` to the command line."""
    p = subparsers.add_parser("worker", help="send one gradient through INA and get the sum")
    _common(p)
    p.add_argument(
        "--ps-ip",
        help="the PS's address (a sharded job takes each task's PS from --state; "
        "with --api: from it)",
    )
    p.add_argument(
        "--index", type=int, help="worker index in the task (0-based; with --api: from it)"
    )
    p.add_argument("--flow-id", type=int, help="this worker's flow id (default index + 1)")
    p.add_argument("--next-node", type=int, default=0, help="id of the first aggregating node")
    p.add_argument(
        "--gradient",
        metavar="FILE.npy",
        help="int32 or float32 gradient to send "
        f"(float32 is scaled by {FIXED_POINT_SCALE}); default: synthetic",
    )
    p.add_argument("--name", help="this worker's name in the topology (with --state or --api)")
    sending_options(p)
    p.add_argument(
        "--verify",
        action="store_true",
        help="check the result against the exact sum of the synthetic gradients",
    )
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("ps", help="parameter server: finish the sums, send results")
    _common(p)
    p.add_argument(
        "--result-flow-id",
        type=int,
        help="flow id of the task's results (the controller's result_flow_id; with --api: from it)",
    )
    p.add_argument(
        "--linger",
        type=float,
        default=1.0,
        help="seconds to keep answering retransmissions after the last fragment; "
        "with --wait-go the PS serves until a second line on stdin instead",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="check this PS's sums (its shard of the model) against the exact sum "
        "of the synthetic gradients (--seed)",
    )
    p.add_argument(
        "--session",
        action="store_true",
        help="serve every step of a training run's all-reduce sessions (any epoch, "
        "any size; dataplane/allreduce.py) until SIGTERM",
    )
    p.set_defaults(func=cmd_ps)
