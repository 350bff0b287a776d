"""Many iterations with a switch restart and a link cut in every `every` iterations: results
stay exact and no process grows (RELIABILITY.md, section 6).

Memory is read from /proc: the long-lived processes (controller daemon, each switch, this
process, which runs Mininet) after every iteration, so a trend can be told from a one-time
step; the workers and PS agents, which are new processes each iteration, by a thread that
follows this process's agent children and keeps each one's peak RSS (VmHWM).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from controller.emulation.mininet_runner import RunnerError

AGENT_POLL_SECONDS = 0.1


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """Resident set size in kB (`VmRSS`, or its peak `VmHWM`); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def long_lived(emu) -> dict[str, int]:
    """The controller, every switch process of `emu` and this process (name -> pid); a
    restarted switch is its new process."""
    procs = {"controller": emu.procs["controller"].pid}
    for name, node in emu.node.items():
        proc = getattr(node, "proc", None)
        if proc is not None:
            procs[f"switch {name}"] = proc.pid
    procs["bench (Mininet)"] = os.getpid()
    return procs


class AgentPeaks:
    """Peak RSS of every worker and PS agent this process starts, per iteration: a thread
    polls /proc for children running `python -m dataplane worker|ps` and keeps each one's last
    VmHWM (read while it lives, so at most AGENT_POLL_SECONDS before it exits)."""

    def __init__(self, host_by_ip: dict[str, str]):
        self.host_by_ip = host_by_ip
        self._peak: dict[str, int] = {}
        self._names: dict[int, str | None] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def take(self) -> dict[str, int]:
        """Peaks since the last call (agent name -> kB), and forget them."""
        with self._lock:
            peaks, self._peak = self._peak, {}
        return peaks

    def _poll(self) -> None:
        me = os.getpid()
        while not self._stop.wait(AGENT_POLL_SECONDS):
            try:
                children = [
                    int(p) for p in (Path(f"/proc/{me}/task/{me}/children").read_text().split())
                ]
            except OSError:
                continue
            for pid in children:
                if self._names.get(pid) is None:  # not yet exec'd (fork, mnexec): look again
                    self._names[pid] = self._agent_name(pid)
                name = self._names[pid]
                kb = rss_kb(pid, "VmHWM") if name else 0
                if name and kb:
                    with self._lock:
                        self._peak[name] = max(self._peak.get(name, 0), kb)
            # forget the finished ones: a pid used again is another process
            self._names = {pid: self._names[pid] for pid in children}

    def _agent_name(self, pid: int) -> str | None:
        """'worker W1' / 'PS P' for an agent (its --ip names the host), '' for another
        process, None while it is not yet running the program it will (just forked)."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            return None
        module = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m"), None)
        if module not in ("dataplane", "controller.cli"):
            return "" if any("dataplane" in a for a in argv) else None
        role = next((a for a in argv if a in ("worker", "ps")), None)
        host = self.host_by_ip.get(argv[argv.index("--ip") + 1]) if "--ip" in argv else None
        return f"{'worker' if role == 'worker' else 'PS'} {host}" if role and host else ""


def schedule(iterations: int, every: int) -> dict[int, str]:
    """Iteration -> fault: in every `every` iterations one switch restart (at `every`/2, then
    each `every` after) and one link cut (at each multiple of `every`); every >= 2."""
    if every < 2:
        raise ValueError(
            "every must be at least 2: a restart and a cut in every `every` iterations"
        )
    faults = {}
    for k in range(1, iterations + 1):
        if k % every == 0:
            faults[k] = "cut"
        elif k % every == every // 2:
            faults[k] = "restart"
    return faults


def long_run(
    emu,
    *,
    iterations: int,
    every: int,
    gradient_mb: float,
    timeout: float,
    cut: tuple[str, str],
    restart: str,
    progress: Callable[[int, dict], None] | None = None,
) -> dict:
    """Iterations 1..`iterations` of `emu`'s job with the faults of `schedule`, each injected
    mid-transfer: `restart` killed and started again empty, or the link `cut` cut (mended once
    that iteration is over, so the plan can move back). An iteration that fails (a hang) is
    recorded as not exact and the run goes on, so memory is still followed to the end."""
    faults = schedule(iterations, every)
    host_by_ip = {ip: host for host, ip in emu.ids.host_ip.items()}
    record: dict = {
        "every": every,
        "events": [],
        "iterations": [],
        "rss_kb_per_iteration": {},
        "agent_peak_rss_kb_per_iteration": {},
    }
    start = {name: rss_kb(pid) for name, pid in long_lived(emu).items()}
    started = time.monotonic()
    with AgentPeaks(host_by_ip) as agents:
        for k in range(1, iterations + 1):
            event = {"iteration": k, "event": faults[k]} if k in faults else None
            version = emu.state()["version"]
            try:
                (it,) = emu.iterate(
                    gradient_mb, k, timeout, during=_injector(emu, event, cut, restart, version)
                )
                row = {
                    "k": k,
                    "seconds": it.seconds,
                    "exact": it.exact,
                    "retransmissions": it.retransmissions,
                    **{
                        key: it.ps_report.get(key)
                        for key in ("fragments", "finished", "miscounted", "duplicates_ignored")
                    },
                }
            except RunnerError as exc:
                row = {"k": k, "seconds": None, "exact": False, "error": str(exc)[:2000]}
            finally:
                if event and event["event"] == "cut":
                    emu.set_link(*cut, up=True)
            if event:
                event["plan_version_after"] = emu.state()["version"]
                record["events"].append(event)
            record["iterations"].append(row)
            for name, pid in long_lived(emu).items():  # growth shows as a trend, a load as a step
                record["rss_kb_per_iteration"].setdefault(name, []).append(rss_kb(pid))
            for name, kb in agents.take().items():
                record["agent_peak_rss_kb_per_iteration"].setdefault(name, []).append([k, kb])
            if progress:
                progress(k, row | ({"event": event} if event else {}))
    end = {name: rss_kb(pid) for name, pid in long_lived(emu).items()}
    state = emu.state()
    record["wall_seconds"] = time.monotonic() - started
    record["rss_kb"] = {name: {"start": start.get(name), "end": end[name]} for name in end}
    record["agent_peak_rss_kb"] = {
        name: {"first": series[0][1], "last": series[-1][1], "max": max(kb for _, kb in series)}
        for name, series in sorted(record["agent_peak_rss_kb_per_iteration"].items())
    }
    record["exact"] = all(i["exact"] for i in record["iterations"])
    record["exact_count"] = sum(i["exact"] for i in record["iterations"])
    record["plan_versions"] = state["version"]
    record["replans"] = state["replans"]
    return record


def _injector(
    emu, event: dict | None, cut: tuple[str, str], restart: str, version: int
) -> Callable[[], None] | None:
    """What runs beside the workers for `event` (filled in with its timings): once the
    transfer is under way, restart the switch or cut the link and time the new plan."""
    if event is None:
        return None

    def inject() -> None:
        try:
            emu.wait_for_traffic(packets=100)
            if event["event"] == "restart":
                timing = emu.restart_switch(restart)
                event.update(boot_seconds=timing.boot_seconds, repush_seconds=timing.repush_seconds)
                return
            emu.set_link(*cut, up=False)
            at = time.monotonic()
            while time.monotonic() - at < 30:
                if emu.state()["version"] > version:
                    event["cut_to_new_plan_seconds"] = time.monotonic() - at
                    return
                time.sleep(0.02)
        except RunnerError as exc:  # recorded: this thread's exceptions would be lost
            event["error"] = str(exc)[:2000]

    return inject


def replan_memory(
    network,
    scheme: str,
    cut: tuple[str, str],
    replans: int,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """This process's RSS around the daemon's re-plan step (controller/service/daemon.py `replan`:
    a solve warm-started from the current plan, then the compile), `replans` times, around
    the cut of `cut` and back in turn: the solver's one-time load (imports, first solve) told
    apart from any growth per re-plan. P4Runtime writes are not part of it."""
    from controller.compiler.program import compile_plan
    from controller.solvers import SolveOptions, solve

    me = os.getpid()
    before = rss_kb(me)
    plan = solve(network, scheme)
    first = rss_kb(me)
    after = []
    for k in range(1, replans + 1):
        view = network.without_links({cut} if k % 2 else set())
        plan = solve(view, scheme, SolveOptions(warm_start=plan))
        compile_plan(view, plan, version=k + 1)
        gc.collect()  # as the daemon does after each re-plan
        after.append(rss_kb(me))
        if progress:
            progress(k)
    return {
        "scheme": scheme,
        "cut": list(cut),
        "rss_kb_before_first_solve": before,
        "rss_kb_after_first_solve": first,
        "rss_kb_after_replan": after,
    }


def idle_memory(
    network,
    plan,
    seconds: float,
    every: float = 30.0,
    progress: Callable[[float], None] | None = None,
) -> dict:
    """The controller daemon (controller/service/daemon.py `run`) in this process for `seconds`,
    driving one embedded switch process without ports per switch of `network`: every link
    is then dead (one failed re-plan), and what is left is what an idle controller does all
    day (probe rounds, counter reads, the state file each second). This process's RSS and
    Python's allocated blocks (`sys.getallocatedblocks`) every `every` seconds: a creep
    shows without Mininet, root, or hours of traffic."""
    import asyncio
    import subprocess
    import sys
    import tempfile

    from controller.service import daemon
    from controller.southbound.p4runtime import SwitchTarget
    from dataplane.bmv2 import free_tcp_port

    targets, switches = {}, []
    for device, name in enumerate(network.switches, start=1):
        address = f"127.0.0.1:{free_tcp_port()}"
        switches.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dataplane",
                    "switch",
                    "--device-id",
                    str(device),
                    "--grpc-addr",
                    address,
                    "--log-level",
                    "warning",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        targets[name] = SwitchTarget(name, address, device)
    samples: list[dict] = []

    async def watch() -> None:
        with tempfile.TemporaryDirectory() as work:
            session = daemon.Session(network, plan, targets, Path(work) / "state.json")
            controller = asyncio.create_task(daemon.run(session, connect_timeout=120))
            started = time.monotonic()
            while True:
                elapsed = time.monotonic() - started
                if controller.done():
                    raise RunnerError(f"the controller stopped: {controller.exception()}")
                samples.append(
                    {
                        "seconds": round(elapsed, 1),
                        "rss_kb": rss_kb(os.getpid()),
                        "python_blocks": sys.getallocatedblocks(),
                    }
                )
                if progress:
                    progress(elapsed)
                if elapsed >= seconds:
                    break
                await asyncio.sleep(min(every, seconds - elapsed))
            controller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await controller

    try:
        asyncio.run(watch())
    finally:
        for proc in switches:
            proc.terminate()
            proc.wait(timeout=10)
    return {"seconds": seconds, "samples": samples}
