"""Following the daemon's plan versions on the plain switches, make-before-break.

Plan versions follow the daemon's, make-before-break (`--follow-state`, the daemon's state
file). A re-plan must never let a host send a flow id that a plain switch would drop, and the
daemon tells the hosts about a new version in that very file, so the daemon leads and waits:

1. the daemon installs version v+1 on the P4 switches beside v, then writes v+1 into its state
   file under `staged` (`version`, `plan`, `dead_links`) while `version` and `workers`, what the
   hosts follow, stay at v;
2. this app polls the file, compiles the staged plan on the topology minus its dead links
   exactly as the daemon compiles it for the P4 switches, adds the rules and groups beside v's,
   confirms them with a barrier per switch and a datapath revalidation round, and writes
   `"version": v+1` to its own state file;
3. the daemon, started with `--openflow-state` naming that file, waits for it (bounded: a dead
   app must not freeze the network) and only then publishes v+1 to the hosts;
4. once the published version reaches v+1, the older versions are deleted after the drain
   time (the daemon's), as the daemon deletes them on the P4 switches.

Versions cannot collide: version v uses generation (v − 1) mod 4 of the flow ids, the result
flow id names its group, and every rule carries its version as cookie, so a version is deleted
by cookie. The rules every version shares (control packets, host routes, misses) are re-added
by the newer version with the same match, which replaces the old rule and its cookie, so they
survive the old version's deletion. A switch that (re)connects is wiped and gets every version
held, oldest first: the current one, and during a handover or a drain the other one too. A
daemon that restarts numbers from 1 again: the app then reinstalls from scratch. Without
`--follow-state` the app holds its one plan; following a daemon that does not wait, it installs
a version once the hosts already have it, and their first packets under it may be dropped
(workers resend them).
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.compiler.program import CompileError, generation
from controller.model.network import Network
from controller.model.plan import Plan
from controller.southbound.openflow.messages import delete_version, send_tables, wipe
from controller.southbound.openflow.rules import SwitchTables, by_dpid, compile_openflow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Announced:
    """A plan version read from the daemon's state file (see `read_daemon_state`)."""

    version: int
    plan: Plan
    dead_links: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def from_dict(cls, entry: dict) -> Announced:
        return cls(
            int(entry["version"]),
            Plan.from_dict(entry["plan"]),
            frozenset(tuple(link) for link in entry.get("dead_links", ())),
        )


UNREADABLE = (OSError, ValueError, KeyError, TypeError)  # a missing or foreign state file


def read_daemon_state(path: Path) -> tuple[Announced, Announced | None]:
    """(the version the hosts follow, the version the daemon stages for the plain switches
    before it publishes it, if any); raises one of UNREADABLE on a file not the daemon's."""
    state = json.loads(path.read_text())
    staged = state.get("staged")
    return Announced.from_dict(state), Announced.from_dict(staged) if staged else None


@dataclass(frozen=True)
class Follow:
    """How the app follows the daemon (`--follow-state`)."""

    network: Network
    daemon_state: Path
    # Seconds between the hosts switching to a new version and the old one's deletion: the
    # daemon's own drain time, so both kinds of switch retire a version together.
    drain_seconds: float = 2.0
    poll_seconds: float = 0.05

    def compile(self, announced: Announced) -> dict[int, SwitchTables]:
        """What `daemon.replan` compiles for the P4 switches, for the plain ones."""
        view = self.network.without_links(set(announced.dead_links))
        return by_dpid(compile_openflow(view, announced.plan, announced.version))


class DaemonFollower:
    """The follower half of `PlainSwitchApp` (controller.southbound.openflow.app): adds the
    versions the daemon announces beside the old ones (make) and deletes the old ones after
    the drain time (break). Uses the app's `follow`, `versions`, `published`, `confirmed`,
    `retire_at`, `datapaths`, `names`, `acks`, `lock`, `is_active` and `_write_state`."""

    # What the app provides (declared for the type checker; the app sets them).
    follow: Follow | None
    versions: dict[int, dict[int, SwitchTables]]
    published: int
    confirmed: int
    retire_at: dict[int, float]
    datapaths: dict[int, Any]
    names: dict[int, str]
    acks: dict[tuple[int, int], threading.Event]
    lock: threading.RLock
    is_active: bool
    _write_state: Callable[[], None]

    def _following(self) -> Follow:
        # A method, not a property: os-ken's app registry reads every attribute of the app
        # (inspect.getmembers), which would evaluate a property before `follow` is set.
        assert self.follow is not None  # the follower runs only with `ina_follow`
        return self.follow

    # -- following the daemon (runs in its own thread)

    def _follow_daemon(self) -> None:
        stamp = None
        while self.is_active:
            time.sleep(self._following().poll_seconds)
            try:
                mtime = self._following().daemon_state.stat().st_mtime_ns
                if mtime != stamp:
                    self.follow_state(*read_daemon_state(self._following().daemon_state))
                    stamp = mtime
            except UNREADABLE as exc:
                log.debug("daemon state not readable yet: %s", exc)
            self.retire_due(time.monotonic())

    def follow_state(self, published: Announced, staged: Announced | None) -> None:
        """Make the switches hold what the daemon's state file announces."""
        if published.version < self.published:
            log.warning(
                "the daemon's plan version went back to %d: it restarted; "
                "reinstalling from scratch",
                published.version,
            )
            self.replace_all(published)
        newest = max((published, staged or published), key=lambda a: a.version)
        if newest.version > max(self.versions):
            self.add_version(newest)
        if published.version > self.published:  # the hosts switched: drain the older ones
            self.published = published.version
            deadline = time.monotonic() + self._following().drain_seconds
            for version in self.versions:
                if version < published.version:
                    self.retire_at.setdefault(version, deadline)

    def _compile(self, announced: Announced) -> dict | None:
        try:
            return self._following().compile(announced)
        except CompileError as exc:
            log.error("plan version %d cannot be installed: %s", announced.version, exc)
            return None

    def add_version(self, announced: Announced) -> None:
        """Make: install `announced` beside what the switches hold; returns once every
        connected switch confirmed it (barrier) and the datapath caches were revalidated."""
        tables = self._compile(announced)
        if tables is None:
            return
        with self.lock:
            for old in [v for v in self.versions if generation(v) == generation(announced.version)]:
                log.warning(
                    "plan v%d reuses the flow ids of v%d, still installed: deleting v%d now",
                    announced.version,
                    old,
                    old,
                )
                self._retire(old)
            self.versions[announced.version] = tables
            for dp in self.datapaths.values():
                send_tables(dp, tables[dp.id], announced.version)
            synced = self._barriers()
        self._await(synced)
        self.confirmed = announced.version
        log.info(
            "plan v%d installed beside %s",
            announced.version,
            sorted(set(self.versions) - {announced.version}),
        )
        self._write_state()

    def retire_due(self, now: float) -> None:
        """Break: delete the versions whose drain time is over."""
        with self.lock:
            due = [v for v, at in self.retire_at.items() if at <= now]
            for version in due:
                self._retire(version)
            synced = self._barriers() if due else {}
        if due:
            self._await(synced)
            log.info("plan version(s) %s deleted", due)
            self._write_state()

    def replace_all(self, announced: Announced) -> None:
        """Hold `announced` only: the daemon restarted and numbers its versions anew."""
        tables = self._compile(announced)
        if tables is None:
            return
        with self.lock:
            self.versions = {announced.version: tables}
            self.retire_at.clear()
            self.confirmed = self.published = announced.version
            for dp in self.datapaths.values():
                wipe(dp)
                send_tables(dp, tables[dp.id], announced.version)
            synced = self._barriers()
        self._await(synced)
        self._write_state()

    def _retire(self, version: int) -> None:
        """Delete `version`'s rules and groups; the lock is held. Rules a newer version
        re-added with the same match (host routes, misses) carry its cookie and stay."""
        for dp in self.datapaths.values():
            delete_version(dp, self.versions[version][dp.id], version)
        del self.versions[version]
        self.retire_at.pop(version, None)

    def _barriers(self) -> dict[int, tuple[object, threading.Event]]:
        """A barrier to every connected switch; the lock is held."""
        synced = {}
        for dpid, dp in self.datapaths.items():
            ack = threading.Event()
            barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
            self.acks[(dpid, dp.set_xid(barrier))] = ack
            dp.send_msg(barrier)
            synced[dpid] = (dp, ack)
        return synced

    def _await(
        self, synced: dict[int, tuple[object, threading.Event]], timeout: float = 10.0
    ) -> None:
        """Wait for the barriers' replies (a switch that disconnects meanwhile gets everything
        when it reconnects), then for a revalidation round: until one has run, the datapath
        goes on using flows it cached from the old tables."""
        deadline = time.monotonic() + timeout
        for dpid, (dp, ack) in synced.items():
            while not ack.wait(0.05) and self.datapaths.get(dpid) is dp:
                if time.monotonic() > deadline:
                    log.warning("%s did not confirm within %g s", self.names[dpid], timeout)
                    break
        if synced:
            _revalidate()


def _revalidate() -> None:
    done = subprocess.run(
        ["ovs-appctl", "revalidator/wait"], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        log.warning("ovs-appctl revalidator/wait failed: %s", done.stderr.strip())
