"""`python -m dataplane.train.worker`: one data-parallel worker of a training run, on its host.

Opens an all-reduce session for the job (dataplane/allreduce.py, ids from the controller's
state file), says it is ready and waits for a line on stdin (the launcher releases every
worker together), then trains (dataplane/train/loop.py) with its shard of every batch and
prints one JSON line per epoch. With --record FILE it keeps, per step, the int32 each
all-reduce round sent and a digest of the sum it got back, so the launcher can check each
result against the sum of every worker's quantized values, bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np

from dataplane.train import data as digits
from dataplane.train import loop


class Recorder:
    """Records a session's rounds (`Session.on_round`): what this worker sent, and what sum
    came back, per step."""

    def __init__(self, session) -> None:
        self.sent: list[np.ndarray] = []  # per step: every round's int32, concatenated
        self.got: list[str] = []  # per step: sha256 of every round's sum, as int64
        self._sent: list[np.ndarray] = []
        self._got = hashlib.sha256()
        session.on_round = self._record

    def _record(self, _round: str, sent: np.ndarray, summed: np.ndarray) -> None:
        self._sent.append(np.asarray(sent, dtype=np.int64))
        self._got.update(np.asarray(summed, dtype=np.int64).tobytes())

    def step_done(self) -> None:
        self.sent.append(np.concatenate(self._sent) if self._sent else np.zeros(0, np.int64))
        self.got.append(self._got.hexdigest())
        self._sent, self._got = [], hashlib.sha256()

    def save(self, path: str) -> None:
        np.savez(
            path,
            lengths=np.array([len(s) for s in self.sent]),
            sent=np.concatenate(self.sent) if self.sent else np.zeros(0, np.int64),
            got=np.array(self.got),
        )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dataplane.train.worker")
    p.add_argument("--iface", required=True)
    p.add_argument("--ip", required=True)
    p.add_argument("--name", required=True, help="this worker's host in the plan")
    p.add_argument("--state", required=True, help="the controller's state file")
    p.add_argument("--index", type=int, required=True, help="this worker's shard of a batch")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--epochs", type=int, default=loop.Config.epochs)
    p.add_argument("--batch", type=int, default=loop.Config.batch)
    p.add_argument("--lr", type=float, default=loop.Config.lr)
    p.add_argument("--momentum", type=float, default=loop.Config.momentum)
    p.add_argument("--seed", type=int, default=loop.Config.seed)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds without a result")
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--record", metavar="FILE.npz")
    p.add_argument("--progress", action="store_true", help="a JSON line per step too")
    p.add_argument("--wait-go", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from dataplane.allreduce import Session

    config = loop.Config(args.epochs, args.batch, args.lr, args.momentum, args.seed)
    d = digits.load()
    session = Session.open(
        iface=args.iface,
        ip=args.ip,
        name=args.name,
        state=args.state,
        timeout=args.timeout,
        rate_scale=args.rate_scale,
    )
    recorder = Recorder(session) if args.record else None
    steps = 0

    def allreduce(array: np.ndarray, op: str) -> np.ndarray:
        nonlocal steps
        started = time.perf_counter()
        out = session.allreduce(array, op)
        if recorder:
            recorder.step_done()
        steps += 1
        if args.progress:
            print(json.dumps({"step": steps, "seconds": time.perf_counter() - started}), flush=True)
        return out

    step = loop.worker(config, d, args.index, args.workers, allreduce)
    if args.wait_go:
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()

    def report(epoch: loop.Epoch, params: np.ndarray) -> None:
        print(json.dumps({"name": args.name, **epoch.to_dict()}), flush=True)

    try:
        params, _ = loop.run(config, d, step, report)
    finally:
        session.close()
        if recorder and args.record:
            recorder.save(args.record)
    digest = hashlib.sha256(params.tobytes()).hexdigest()
    print(json.dumps({"name": args.name, "done": True, "steps": steps, "params": digest}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
