"""Progress of a long solve, for the person waiting: the time spent, and the best value and the
bound a scheme has proven so far where it reports them.

Schemes call `report` as they learn something (a bisection probe decided, a CP-SAT solution);
it costs a lock and an assignment and does nothing unless a `watch` is running. `ina solve`
runs one on stderr when that is a terminal (or with --progress), printing a line every few
seconds once the solve has taken longer than the first interval. A line is whole (no carriage
return tricks), so it reads the same in a log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_lock = threading.Lock()
_latest: dict[str, float | str | None] = {}
_watching = threading.Event()


def watching() -> bool:
    """Whether anyone listens: schemes may skip work that only serves `report`."""
    return _watching.is_set()


def report(best: float | None = None, bound: float | None = None, what: str = "rate") -> None:
    """The best value found so far and the proven bound (Gbps), either may be unknown."""
    if not _watching.is_set():
        return
    with _lock:
        if best is not None:
            _latest["best"] = best
        if bound is not None:
            _latest["bound"] = bound
        _latest["what"] = what


def line(scheme: str, elapsed: float, limit: float | None) -> str:
    with _lock:
        best, bound, what = _latest.get("best"), _latest.get("bound"), _latest.get("what")
    out = f"{scheme}: {elapsed:.0f} s" + ("" if limit is None else f" of {limit:g} s")
    if best is not None:
        out += f", best {what} {best:.4g} Gbps"
    if bound is not None:
        out += f", bound {bound:.4g} Gbps"
    return out


@contextmanager
def watch(
    stream: TextIO, scheme: str, limit: float | None, interval: float = 5.0
) -> Iterator[None]:
    """Print a progress line on `stream` every `interval` seconds while the block runs."""
    with _lock:
        _latest.clear()
    _watching.set()
    stop = threading.Event()
    started = time.monotonic()

    def run() -> None:
        while not stop.wait(interval):
            print(line(scheme, time.monotonic() - started, limit), file=stream, flush=True)

    thread = threading.Thread(target=run, name="solve-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _watching.clear()
