"""A gRPC call cancelled under the caller is a failed call, not the caller's cancellation.

grpc.aio raises `asyncio.CancelledError` in whatever task awaits a call whose channel closed
(finsy closes a switch's channel when its connection drops, e.g. while the switch restarts).
A loop that lets that error through ends exactly as if it had been cancelled, and nothing
reports it: a TaskGroup ignores a child that ends cancelled. That is how the link monitor
stopped judging at a switch restart, and the next cut was never planned around (the bmv2
long-run test hung at a cut, RELIABILITY.md section 6). Python tells the two apart:
`Task.cancelling()` counts the cancellations requested of the task itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class CallCancelled(Exception):
    """A call was cancelled by its channel closing; the task awaiting it was not."""


@contextmanager
def call_cancelled_as_error() -> Iterator[None]:
    """Turn a CancelledError that was not requested of the current task into CallCancelled;
    the task's own cancellation (a deadline of `asyncio.timeout` included) passes through."""
    try:
        yield
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        raise CallCancelled("the call was cancelled: its channel closed") from None
