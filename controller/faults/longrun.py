"""Many iterations with a switch restart and a link cut every `every`: results stay exact and
no long-lived process grows (issue 15 item 6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def rss_kb(pid: int) -> int:
    """Resident set size in kB (VmRSS); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def long_lived(emu) -> dict[str, int]:
    """The controller and every switch process of `emu` (name -> pid); a restarted switch
    is its new process."""
    procs = {"controller": emu.procs["controller"].pid}
    for name, node in emu.node.items():
        proc = getattr(node, "proc", None)
        if proc is not None:
            procs[f"switch {name}"] = proc.pid
    return procs


def long_run(emu, *, iterations: int, every: int, gradient_mb: float, timeout: float,
             cut: tuple[str, str], restart: str,
             progress: Callable[[int, object], None] | None = None) -> dict:
    """Iterations 1..`iterations` of `emu`'s job; at every `every`-th one, mid-transfer,
    alternately `restart` is killed and restarted and the link `cut` is cut (and repaired once
    that iteration is over, so the plan can come back to it)."""
    record: dict = {"events": [], "iterations": [], "rss_kb_per_iteration": {}}
    start = {name: rss_kb(pid) for name, pid in long_lived(emu).items()}
    for k in range(1, iterations + 1):
        event = None
        if k % every == 0:
            event = "restart" if (k // every) % 2 else "cut"
        during = None
        if event == "restart":
            def during() -> None:
                emu.wait_for_traffic(packets=100)
                emu.restart_switch(restart)
        elif event == "cut":
            def during() -> None:
                emu.wait_for_traffic(packets=100)
                emu.set_link(*cut, up=False)
        (it,) = emu.iterate(gradient_mb, k, timeout, during=during)
        if event == "cut":
            emu.set_link(*cut, up=True)
        if event:
            record["events"].append({"iteration": k, "event": event})
        record["iterations"].append({"k": k, "seconds": it.seconds, "exact": it.exact,
                                     "retransmissions": it.retransmissions})
        for name, pid in long_lived(emu).items():  # growth shows as a trend, a load as a step
            record["rss_kb_per_iteration"].setdefault(name, []).append(rss_kb(pid))
        if progress:
            progress(k, it)
    end = {name: rss_kb(pid) for name, pid in long_lived(emu).items()}
    state = emu.state()
    record["rss_kb"] = {name: {"start": start.get(name), "end": end[name]} for name in end}
    record["exact"] = all(i["exact"] for i in record["iterations"])
    record["plan_versions"] = state["version"]
    record["replans"] = state["replans"]
    return record
