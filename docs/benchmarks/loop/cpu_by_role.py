"""CPU seconds of every `controller.cli` and `python -m dataplane` process of a run, by role.

And of the whole machine.

Run as root beside `ina mininet` (docs/loop-profile.md): it samples /proc every 0.5 s until
STOPFILE exists, keeps each process's last utime + stime (processes exit during the run) and
writes the totals per role (switch by device id, worker by name, ps, controller, runner) and
the machine's /proc/stat deltas to OUT.json, with every sample's totals per role and the
machine's busy seconds so far (`series`: CPU within a time window, e.g. one iteration). With
ROOT_PID, only that process and its
descendants count (others' tests and runs on the same machine start the same commands).

    python docs/benchmarks/loop/cpu_by_role.py OUT.json STOPFILE [ROOT_PID] &
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
ROLES = (
    ("switch", r" switch .*--device-id (\d+)"),
    ("worker", r" worker .*--name (\S+)"),
    ("workers", r" workers ()"),  # several workers' agents in one process (--agent-processes)
    ("ps", r" ps ()"),
    ("controller", r" controller ()"),
    ("runner", r" mininet ()"),
)


def role(cmdline: str) -> str | None:
    for name, pattern in ROLES:
        if match := re.search(pattern, cmdline):
            return f"{name} {match.group(1)}".strip()
    return None


def machine() -> dict[str, float]:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    values = [int(v) / HZ for v in fields]
    return dict(
        zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq"), values, strict=False)
    )


def descendants(root: str) -> set[str]:
    parent = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[pid] = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
    tree, grew = {root}, True
    while grew:
        new = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= new
        grew = bool(new)
    return tree


def sample(last: dict[tuple[str, str], tuple[float, float]], root: str | None) -> None:
    pids = descendants(root) if root else filter(str.isdigit, os.listdir("/proc"))
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
            ours = "controller.cli" in cmdline or "-m dataplane " in cmdline
            if not ours or (name := role(cmdline)) is None:
                continue
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        last[(pid, name)] = (int(stat[11]) / HZ, int(stat[12]) / HZ)


def totals(last: dict[tuple[str, str], tuple[float, float]]) -> dict[str, float]:
    """CPU seconds per role so far."""
    by_role: dict[str, float] = {}
    for (_, name), (user, system) in last.items():
        by_role[name] = round(by_role.get(name, 0.0) + user + system, 2)
    return by_role


def main(out: str, stop: str, root: str | None = None) -> None:
    last: dict[tuple[str, str], tuple[float, float]] = {}
    before, started = machine(), time.time()
    series = []
    while not os.path.exists(stop):
        sample(last, root)
        now = machine()
        busy = sum(now[k] - before[k] for k in now if k not in ("idle", "iowait"))
        series.append([round(time.time(), 2), round(busy, 2), totals(last)])
        time.sleep(0.5)
    after = machine()
    roles: dict[str, dict[str, float]] = {}
    for (_, name), (user, system) in last.items():
        total = roles.setdefault(name, {"cpu": 0.0, "user": 0.0, "system": 0.0})
        total["cpu"] += user + system
        total["user"] += user
        total["system"] += system
    Path(out).write_text(
        json.dumps(
            {
                "wall": time.time() - started,
                "machine": {k: round(after[k] - before[k], 2) for k in before},
                "roles": roles,
                "series": series,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
