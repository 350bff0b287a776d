"""`ina allreduce-demo`: N training processes all-reduce float32 gradients step after step
through one embedded switch (the worker library, dataplane/allreduce.py), against the exact sum.

Builds veth pairs and the switch as `ina dataplane-demo` does, runs `ina ps --session` and one
process per worker (forked, each with its own `Session` in the hosts' namespace), and per step
records the slowest worker's time, the largest error against the float64 sum of every worker's
array, and the largest stated bound. The same arrays through one global scale 2**16 (what
`ina worker --gradient` sends) are scored alongside: how many elements overflow or vanish.
Prints one JSON summary; with --out, writes it and a PNG there.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from dataplane.bmv2 import free_tcp_port
from dataplane.demo import JOB, RESULT_FLOW, SWITCH_NODE, TASK, program_aggregation
from dataplane.frame import SLOTS_PER_PIPE
from dataplane.gradients import FIXED_POINT_SCALE
from dataplane.netns import VethNet
from dataplane.p4rt_client import Client
from dataplane.targets import missing, program_for, start_target

ROOT = Path(__file__).resolve().parent.parent


def gradient(seed: int, worker: int, step: int, elements: int, spread: int) -> np.ndarray:
    """Worker `worker`'s float32 gradient of `step`: normal values times 10**e, e uniform in
    [-spread, spread] per element (gradients span many magnitudes)."""
    rng = np.random.default_rng([seed, worker, step])
    scale = 10.0 ** rng.integers(-spread, spread + 1, elements)
    return (rng.standard_normal(elements) * scale).astype(np.float32)


def _worker(args: argparse.Namespace, net: VethNet, index: int, out: Connection) -> None:
    from dataplane.allreduce import Session

    rows = []
    try:
        with Session.open(
            iface=net.host_if[index + 1],
            ip=f"10.0.0.{index + 1}",
            netns=net.ns,
            ps_ip=f"10.0.0.{args.workers + 1}",
            index=index,
            workers=args.workers,
            job=JOB,
            task=TASK,
            next_node=SWITCH_NODE,
            timeout=args.timeout,
        ) as session:
            out.send("ready")
            out.recv()
            for step in range(args.steps):
                grad = gradient(args.seed, index, step, args.elements, args.spread)
                started = time.perf_counter()
                result = session.allreduce(grad)
                seconds = time.perf_counter() - started
                assert session.last_bound is not None
                rows.append((seconds, result, session.last_bound))
        exact = [
            sum(
                gradient(args.seed, i, step, args.elements, args.spread).astype(np.float64)
                for i in range(args.workers)
            )
            for step in range(args.steps)
        ]
        out.send(
            [
                {
                    "seconds": seconds,
                    "max_error": float(np.max(np.abs(result - e))),
                    "max_bound": float(np.max(bound)),
                    "within_bound": bool(np.all(np.abs(result - e) <= bound)),
                    "max_relative_error": float(np.max(np.abs(result - e)) / np.max(np.abs(e))),
                }
                for (seconds, result, bound), e in zip(rows, exact, strict=True)
            ]
        )
    except Exception as exc:  # reported by the parent in its summary
        out.send({"error": f"{type(exc).__name__}: {exc}"})


def global_scale_score(args: argparse.Namespace) -> dict:
    """The same arrays through one scale 2**16: elements whose int32 sum overflows, and
    nonzero inputs rounded to 0."""
    overflow = vanished = 0
    for step in range(args.steps):
        grads = [
            gradient(args.seed, i, step, args.elements, args.spread) for i in range(args.workers)
        ]
        fixed = [np.round(g.astype(np.float64) * FIXED_POINT_SCALE) for g in grads]
        partial = np.zeros(args.elements)
        over = np.zeros(args.elements, bool)
        for f in fixed:
            partial += f
            over |= (np.abs(f) > 2**31 - 1) | (np.abs(partial) > 2**31 - 1)
        overflow += int(over.sum())
        vanished += sum(int(((f == 0) & (g != 0)).sum()) for f, g in zip(fixed, grads, strict=True))
    total = args.steps * args.elements
    return {
        "overflowed_elements": overflow,
        "elements": total,
        "vanished_inputs": vanished,
        "inputs": total * args.workers,
    }


def run(args: argparse.Namespace) -> dict:
    ps_port = args.workers + 1
    program = program_for("embedded")
    ctx = multiprocessing.get_context("fork")
    with VethNet(ps_port) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target("embedded", net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            program_aggregation(client, list(range(1, ps_port)), ps_port, slots=SLOTS_PER_PIPE)
            client.close()
            ps = subprocess.Popen(
                [
                    *("ip", "netns", "exec", net.ns, sys.executable, "-m", "dataplane"),
                    *("ps", "--session", "--iface", net.host_if[ps_port]),
                    *("--ip", f"10.0.0.{ps_port}", "--workers", str(args.workers)),
                    *("--result-flow-id", str(RESULT_FLOW), "--job", str(JOB)),
                    *("--task", str(TASK), "--wait-go"),
                ],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert ps.stdin is not None and ps.stdout is not None
            ps.stdout.readline()  # ready
            pipes, procs = [], []
            for i in range(args.workers):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(args, net, i, theirs))
                proc.start()
                pipes.append(mine)
                procs.append(proc)
            for p in pipes:
                p.recv()
            ps.stdin.write("go\n")
            ps.stdin.flush()
            for p in pipes:  # released together, as --wait-go does for `ina worker`
                p.send("go")
            results = [p.recv() for p in pipes]
            for proc in procs:
                proc.join(timeout=30)
            ps_report = json.loads(ps.communicate("stop\n", timeout=30)[0].splitlines()[-1])
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    errors = [r["error"] for r in results if isinstance(r, dict)]
    steps = []
    if not errors:
        for step in range(args.steps):
            per = [r[step] for r in results]
            steps.append(
                {
                    "step": step,
                    "seconds": round(max(p["seconds"] for p in per), 4),
                    "max_error": max(p["max_error"] for p in per),
                    "max_bound": max(p["max_bound"] for p in per),
                    "max_relative_error": max(p["max_relative_error"] for p in per),
                    "within_bound": all(p["within_bound"] for p in per),
                }
            )
    seconds = sorted(s["seconds"] for s in steps)
    return {
        "config": {k: getattr(args, k) for k in ("workers", "elements", "steps", "spread", "seed")},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "errors": errors,
        "all_within_bound": bool(steps) and all(s["within_bound"] for s in steps),
        "median_step_seconds": seconds[len(seconds) // 2] if seconds else None,
        "max_relative_error": max((s["max_relative_error"] for s in steps), default=None),
        "global_scale_2_16": global_scale_score(args),
        "ps": ps_report,
        "steps": steps,
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = report["steps"]
    fig, (time_ax, err_ax) = plt.subplots(1, 2, figsize=(11, 4))
    x = [s["step"] for s in steps]
    time_ax.plot(x, [1000 * s["seconds"] for s in steps], "o-")
    time_ax.set_xlabel("step")
    time_ax.set_ylabel("allreduce time, slowest worker (ms)")
    time_ax.set_ylim(bottom=0)
    err_ax.semilogy(x, [s["max_error"] for s in steps], "o-", label="max |result - exact|")
    err_ax.semilogy(x, [s["max_bound"] for s in steps], "s--", label="max stated bound")
    err_ax.set_xlabel("step")
    for ax in (time_ax, err_ax):
        ax.set_xticks(x)
    err_ax.legend()
    cfg = report["config"]
    fig.suptitle(
        f"{cfg['workers']} workers x {cfg['elements']} float32, values 10^±{cfg['spread']}, "
        f"embedded switch; load {report['load_average'][0]}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cmd_allreduce_demo(args: argparse.Namespace) -> int:
    reason = missing("embedded")
    if reason:
        print(f"ina allreduce-demo: {reason}", file=sys.stderr)
        return 1
    if os.geteuid() != 0:
        print("ina allreduce-demo: needs root (network namespaces)", file=sys.stderr)
        return 2
    if args.out and not Path(args.out).is_dir():
        print(f"ina allreduce-demo: --out {args.out}: no such directory", file=sys.stderr)
        return 2
    report = run(args)
    print(json.dumps({k: v for k, v in report.items() if k != "steps"}, indent=2))
    if args.out:
        out = Path(args.out)
        (out / "allreduce.json").write_text(json.dumps(report, indent=2) + "\n")
        if report["steps"]:
            plot(report, out / "allreduce.png")
    return 0 if report["all_within_bound"] and not report["errors"] else 1


def _positive(kind: type, low: int | float = 1):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {text}")
        return value

    return parse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "allreduce-demo",
        help="N training processes all-reduce float32 gradients through one embedded switch",
    )
    p.add_argument("--workers", type=_positive(int, 1), default=3, help="default 3")
    p.add_argument(
        "--elements", type=_positive(int, 1), default=100_000, help="per gradient (100000)"
    )
    p.add_argument("--steps", type=_positive(int, 1), default=10, help="default 10")
    p.add_argument(
        "--spread",
        type=_positive(int, 0),
        default=6,
        help="values are normal times 10**e, e uniform in [-spread, spread] (default 6)",
    )
    p.add_argument("--seed", type=int, default=0, help="default 0")
    p.add_argument(
        "--timeout", type=_positive(float, 0.1), default=30.0, help="PeerMissing after (30 s)"
    )
    p.add_argument("--out", metavar="DIR", help="write allreduce.json and allreduce.png here")
    p.set_defaults(func=cmd_allreduce_demo)
