"""`ina train` on Mininet: a data-parallel training run whose gradients the switches sum.

Builds the emulation of one plan (controller.emulation.mininet_runner.Emulation: switches,
the controller programming them), starts a PS for the whole run (`ina ps --session`) and one
training process per worker (dataplane/train/worker.py) on their hosts, releases them
together and collects each epoch's test accuracy and each step's time. Optionally with loss
on every link (nftables, controller.emulation.faults.impair) or one link cut mid-epoch (the
controller re-plans around it; the sessions follow).

Checks, independent of the library under test: every worker ends with the same parameters,
and each step's all-reduce result equals, bit for bit, the sum of the int32 values every
worker sent (each worker records what it sent and a digest of what it got back).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from controller.emulation.mininet_runner import (
    AGENT_START_SECONDS,
    PACING_HEADROOM,
    Emulation,
    RunnerError,
    _no_agent_outlives,
    _ps_report,
    _release_when_ready,
    worker_rate_gbps,
)
from controller.model.network import Network
from controller.model.plan import Plan
from dataplane.train.loop import Config


@dataclass(frozen=True)
class Faults:
    loss_percent: float = 0.0  # on every link, both directions
    cut: tuple[str, str, float] | None = None  # (a, b, epoch): cut a-b halfway through epoch


@dataclass
class TrainRun:
    """One scheme's training run on Mininet."""

    scheme: str
    plan_rate_gbps: float
    workers: int
    epochs: list[dict] = field(default_factory=list)  # epoch, accuracy, loss, steps, ...
    step_seconds: list[float] = field(default_factory=list)  # per step, slowest worker
    ps_bytes: int = 0  # bytes the PS's switch sent it, over the whole run
    steps: int = 0
    exact_steps: int = 0  # steps whose every result equals the sum of what was sent
    same_params: bool = False  # every worker ended with the same parameters
    cut_at_step: int | None = None
    replans: int = 0
    loss_measured: dict = field(default_factory=dict)  # frames offered, dropped, received
    wall_seconds: float = 0.0

    @property
    def ps_bytes_per_step(self) -> float:
        return self.ps_bytes / max(1, self.steps)

    @property
    def exact(self) -> bool:
        return self.steps > 0 and self.exact_steps == self.steps and self.same_params

    def to_dict(self) -> dict:
        return {**asdict(self), "ps_bytes_per_step": self.ps_bytes_per_step, "exact": self.exact}


def train(
    network: Network,
    plan: Plan,
    config: Config,
    *,
    target: str = "embedded",
    faults: Faults = Faults(),
    timeout: float = 30.0,
    on_epoch=None,
) -> TrainRun:
    """Train on the emulated network under `plan`; raises RunnerError naming what failed."""
    tp = plan.tasks[0]
    names = list(tp.paths)
    result = TrainRun(plan.scheme, worker_rate_gbps(plan), len(names))
    with Emulation(network, plan, target=target) as emu:
        from controller.emulation.faults import impair

        before = impair.interface_packets(emu)
        with (
            impair.LinkImpairments(emu, impair.Impairment("loss", faults.loss_percent))
            if faults.loss_percent
            else nullcontext()
        ) as lossy:
            _run(emu, names, config, faults, timeout, result, on_epoch)
            if lossy is not None:  # what really happened, from the counters
                result.loss_measured = impair.measured(
                    emu, lossy.counters(), before, impair.interface_packets(emu)
                )
        result.replans = len(emu.state().get("replans", []))
    return result


def _run(emu: Emulation, names, config, faults, timeout, result, on_epoch) -> None:
    tp = emu.plan.tasks[0]
    rows = {
        r["worker"]: r
        for r in emu.state()["workers"]
        if (r["job_id"], r["task_id"]) == emu._ids(tp)
    }
    port = emu._ps_port(tp)
    ps = emu.node[tp.ps].popen(
        [
            sys.executable,
            "-m",
            "dataplane",
            "ps",
            "--session",
            "--iface",
            emu.host_intf[tp.ps],
            "--ip",
            emu.ids.host_ip[tp.ps],
            "--state",
            str(emu.state_file),
            "--job",
            str(emu.ids.job_id(tp.job)),
            "--task",
            str(emu.ids.task_id(tp.job, tp.task)),
            "--workers",
            str(len(names)),
            "--result-flow-id",
            str(next(iter(rows.values()))["result_flow_id"]),
            "--wait-go",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    rate_scale = emu.pace / 1000 * PACING_HEADROOM
    records = {w: emu.workdir / f"train-{w}.npz" for w in names}
    workers = {
        w: emu.node[w].popen(
            [
                sys.executable,
                "-m",
                "dataplane.train.worker",
                "--iface",
                emu.host_intf[w],
                "--ip",
                emu.ids.host_ip[w],
                "--name",
                w,
                "--state",
                str(emu.state_file),
                "--index",
                str(index),
                "--workers",
                str(len(names)),
                "--epochs",
                str(config.epochs),
                "--batch",
                str(config.batch),
                "--lr",
                repr(config.lr),
                "--momentum",
                repr(config.momentum),
                "--seed",
                str(config.seed),
                "--timeout",
                str(timeout),
                "--rate-scale",
                f"{rate_scale:.12f}",
                "--record",
                str(records[w]),
                "--progress",
                "--wait-go",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for index, w in enumerate(names)
    }
    lines: dict[str, list[dict]] = {w: [] for w in names}
    tails: dict[str, list[str]] = {w: [] for w in names}
    steps_per_epoch = None
    cut_step = None
    if faults.cut:
        from dataplane.train.data import batches, load

        steps_per_epoch = len(batches(len(load().y_train), config.batch, config.seed, 1))
        cut_step = max(1, round((faults.cut[2] - 1) * steps_per_epoch + steps_per_epoch / 2))
    cut_done = threading.Event()

    def read(w: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode(errors="replace").strip()
            if not text.startswith("{"):
                tails[w] = (tails[w] + [text])[-20:]
                continue
            line = json.loads(text)
            lines[w].append(line)
            if on_epoch and "epoch" in line and w == names[0]:
                on_epoch(line)
            if cut_step and "step" in line and line["step"] >= cut_step and not cut_done.is_set():
                cut_done.set()
                assert faults.cut is not None
                emu.set_link(faults.cut[0], faults.cut[1], up=False)
                result.cut_at_step = line["step"]

    before = _tx_bytes(port)
    with _no_agent_outlives([ps, *workers.values()]):
        _release_when_ready({f"PS {tp.ps}": ps} | workers, time.monotonic() + AGENT_START_SECONDS)
        started = time.monotonic()
        readers = [
            threading.Thread(target=read, args=(w, proc), daemon=True)
            for w, proc in workers.items()
        ]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
        for w, proc in workers.items():
            if proc.wait() != 0 or not any(ln.get("done") for ln in lines[w]):
                for other in [ps, *workers.values()]:
                    if other.poll() is None:
                        other.kill()
                said = "; ".join(tails[w][-3:]) or json.dumps(lines[w][-1:])
                raise RunnerError(f"training worker {w} failed: {said[-600:]}")
        result.wall_seconds = time.monotonic() - started
    ps_said = _ps_report(ps)
    result.ps_bytes = _tx_bytes(port) - before
    _summarise(result, names, lines, records, ps_said)


def _summarise(result: TrainRun, names, lines, records, ps_said) -> None:
    first = lines[names[0]]
    result.epochs = [
        {k: v for k, v in ln.items() if k not in ("name", "step_seconds")}
        for ln in first
        if "epoch" in ln
    ]
    # per step, the slowest worker's all-reduce (steps wait for each other, so nearly equal)
    per_worker = [[ln["seconds"] for ln in lines[w] if "step" in ln] for w in names]
    result.step_seconds = [max(s) for s in zip(*per_worker, strict=True)]
    result.steps = len(result.step_seconds)
    done = [next(ln for ln in lines[w] if ln.get("done")) for w in names]
    result.same_params = len({d["params"] for d in done}) == 1
    result.exact_steps = exact_steps({w: np.load(records[w]) for w in names})
    for e in result.epochs:
        lo = sum(x["steps"] for x in result.epochs if x["epoch"] < e["epoch"])
        e["step_seconds"] = float(np.mean(result.step_seconds[lo : lo + e["steps"]]))
    result.epochs[-1]["ps"] = ps_said


def exact_steps(records: dict[str, dict]) -> int:
    """Steps whose result every worker got equals the int64 sum of what all of them sent."""
    first = next(iter(records.values()))
    ends = np.cumsum(first["lengths"])
    total = sum(r["sent"].astype(np.int64) for r in records.values())
    good = 0
    for step, (lo, hi) in enumerate(zip(np.concatenate([[0], ends[:-1]]), ends, strict=True)):
        digest = hashlib.sha256(total[lo:hi].astype(np.int64).tobytes()).hexdigest()
        good += all(str(r["got"][step]) == digest for r in records.values())
    return good


def _tx_bytes(interface: str) -> int:
    return int(Path(f"/sys/class/net/{interface}/statistics/tx_bytes").read_text())
