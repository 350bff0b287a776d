"""The queue an interface really has: its queue disciplines, as `tc` reports them.

A switch port or a worker with no congestion depth given marks from half of its own queue
(p4src/README.md, "Congestion mark"), so it must know how many frames that queue holds: the
packet limit of its FIFO-like qdisc (Mininet puts a `pfifo limit N` under its htb shaper), or
the interface's txqueuelen where the kernel's default leaf queue holds the frames (pfifo_fast,
an htb class without a qdisc of its own). `noqueue` (a veth's default) holds nothing: frames
go straight to the peer and such a port never marks. `tc -j` is iproute2's JSON output, the
same tool Mininet shapes links with. The emulation reads the qdiscs' drop counters here too.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

# qdiscs whose `limit` counts packets (tbf and bfifo count bytes).
PACKET_LIMITS = frozenset(
    {"pfifo", "pfifo_head_drop", "netem", "fq_codel", "codel", "fq", "fq_pie", "pie", "sfq", "red"}
)


def command(interface: str, stats: bool = False) -> list[str]:
    """The `tc` command that lists `interface`'s qdiscs as JSON (with `stats`: their counters)."""
    return ["tc", "-j", *(["-s"] if stats else []), "qdisc", "show", "dev", interface]


def parse(text: str) -> list[dict]:
    """`command`'s output as a list of qdiscs ([] for anything else: tc failed, no device)."""
    try:
        found = json.loads(text or "[]")
    except ValueError:
        return []
    return found if isinstance(found, list) else []


def show(interface: str, stats: bool = False) -> list[dict]:
    """`interface`'s qdiscs, read with `tc` in this process's network namespace."""
    try:
        done = subprocess.run(command(interface, stats), capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse(done.stdout)


def limit_of(qdiscs: list[dict], txqueuelen: int) -> int | None:
    """Frames the queue of an interface with `qdiscs` (`show`'s answer) holds: the least packet
    limit among them; none and only `noqueue`: None (no queue); otherwise `txqueuelen`, the
    limit of the kernel's default leaf queue."""
    limits = [
        int(q["options"]["limit"])
        for q in qdiscs
        if q.get("kind") in PACKET_LIMITS and "limit" in q.get("options", {})
    ]
    if limits:
        return min(limits)
    if not qdiscs or all(q.get("kind") == "noqueue" for q in qdiscs):
        return None
    return txqueuelen


def queue_limit(interface: str) -> int | None:
    """Frames `interface`'s queue holds, None when it has no queue (see `limit_of`)."""
    try:
        txqueuelen = int(Path(f"/sys/class/net/{interface}/tx_queue_len").read_text())
    except (OSError, ValueError):
        return None
    return limit_of(show(interface), txqueuelen)


def mark_depth(limit: int | None) -> int | None:
    """The depth a queue of `limit` frames marks from: half of it, at least 1 (None: never)."""
    return None if not limit else max(1, limit // 2)


def drops(qdiscs: list[dict]) -> int:
    """Frames the queue dropped (`show(stats=True)`'s answer): the root qdisc's count, which
    includes what its classes' leaf queues dropped (htb counts a child's drop as its own)."""
    return sum(int(q.get("drops", 0)) for q in qdiscs if q.get("root"))
