"""The controller's state file as the agents read it: the plan version each agent follows
(`PlanWatcher`) and how a job's model is sharded over its tasks (`job_shares`). Agents
elsewhere read the same rows from the controller's API (`dataplane.plan_api`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class PlanSource(Protocol):
    """Where an agent hears of a newer plan: the state file (`PlanWatcher`) or the API
    (`plan_api.ApiWatcher`)."""

    version: int

    def poll(self, now: float) -> dict | None: ...


@dataclass
class PlanWatcher:
    """Follows the controller's state file for the row (a worker assignment) `match` picks.

    The controller replaces the file atomically, so a read never sees half of it.
    """

    path: Path
    match: Callable[[dict], bool]
    version: int = 0
    _stamp: int = 0
    _next_check: float = 0.0

    def poll(self, now: float) -> dict | None:
        """The matching row of a newer plan version, at most every 0.1 s; else None."""
        if not self._due(now):
            return None
        try:
            stamp = os.stat(self.path).st_mtime_ns
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            state = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return self._adopt(state)

    def _due(self, now: float) -> bool:
        if now < self._next_check:
            return False
        self._next_check = now + 0.1
        return True

    def _adopt(self, state: dict) -> dict | None:
        """The matching row of `state` if its plan version is newer than the one followed."""
        if state["version"] <= self.version:
            return None
        row = next((r for r in state["workers"] if self.match(r)), None)
        if row is not None:
            self.version = state["version"]
        return row


def job_shares(state_path: str | None, job: int) -> dict[int, float] | None:
    """Task id → `model_share` of job `job`, in task order, from the controller's state file;
    None when the job is not sharded (or there is no state file to say so)."""
    if not state_path:
        return None
    try:
        rows = json.loads(Path(state_path).read_text())["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rows_shares(rows, job)


def rows_shares(rows: list[dict], job: int) -> dict[int, float] | None:
    """`job_shares` of the rows themselves (the state file's, or the API's)."""
    shares: dict[int, float] = {}
    for r in rows:
        if r["job_id"] == job:
            if r.get("model_share") is None:
                return None
            shares[r["task_id"]] = float(r["model_share"])
    return dict(sorted(shares.items())) or None
