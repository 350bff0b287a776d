"""P4Runtime driver for INA switches, on finsy.

finsy reconnects by itself and keeps no state cache, so the ready handler reconciles each
time the switch (re)connects as primary, or this controller becomes primary (failover): it
reads back what the switch holds, writes only the difference to the compiled program (inserts,
modifies, deletes; `writes` counts them), reads everything back again and compares it with the
program (P4Runtime's read-write symmetry), so a switch that silently dropped or altered an
entry is noticed. A restarted switch holds nothing, so it gets everything; a switch that a
failed controller left programmed gets only what differs, and its traffic keeps flowing.

Arbitration is finsy's (P4Runtime "Client Arbitration"): the live client with the highest
election id is primary; a backup writes nothing and only reads. When the primary's stream goes,
the switch has no primary until a client advertises an election id at least as high as the
highest it has seen: finsy's backup, told NOT_FOUND, re-advertises that id and takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finsy import (
    GRPCCredentialsTLS,
    P4ClientError,
    P4CloneSessionEntry,
    P4CounterEntry,
    P4MulticastGroupEntry,
    P4TableEntry,
    Switch,
    SwitchEvent,
    SwitchOptions,
)
from finsy import switch as finsy_switch
from finsy.grpcutil import GRPCStatusCode
from finsy.p4entity import P4EntityList

from controller.compiler.program import SwitchProgram
from controller.southbound.cancelled import CallCancelled, call_cancelled_as_error

LOG = logging.getLogger(__name__)

# finsy waits 10 s before reconnecting when a connection cycle lasted under 2 s, which is what
# a restarting switch looks like while its process boots; a controller that must re-push a
# restarted switch within 2 s retries sooner. The knob is a private module constant of finsy
# 0.30 (no option exists), so it is set only where it exists.
_RECONNECT_THROTTLE_SECONDS = 0.5
if hasattr(finsy_switch, "_FAIL_THROTTLE_SECS"):
    finsy_switch._FAIL_THROTTLE_SECS = _RECONNECT_THROTTLE_SECONDS
P4SRC = Path(__file__).resolve().parents[2] / "p4src"
P4INFO = P4SRC / "ina.p4info.txtpb"
# The device config pushed with the P4Info: bmv2 needs p4c's JSON (`--p4blob`); the embedded
# target executes the program built into it and ignores the blob, so the P4 source is sent to
# name the program version (finsy only pushes a pipeline when it has both parts).
EMBEDDED_BLOB = P4SRC / "ina.p4"
COUNTERS = (
    "aggregations_completed",
    "collisions",
    "duplicates",
    "malformed",
    "unknown_job",
    "forged",
)
# Answers that may change on a retry (a switch still booting, a busy one); any other answer
# given twice in a row, such as NOT_FOUND for a device id the switch does not have (the
# embedded target at arbitration) or UNKNOWN "Error when trying to assign device" (bmv2 at
# SetForwardingPipelineConfig), will not.
TRANSIENT = (
    GRPCStatusCode.UNAVAILABLE,
    GRPCStatusCode.DEADLINE_EXCEEDED,
    GRPCStatusCode.CANCELLED,
    GRPCStatusCode.ABORTED,
    GRPCStatusCode.RESOURCE_EXHAUSTED,
    GRPCStatusCode.FAILED_PRECONDITION,
)


# A reinstall that failed on a transient answer (`TRANSIENT`) while the channel stayed up is
# tried again after this many seconds, doubled per failure up to the ceiling.
REINSTALL_RETRY_SECONDS = 1.0
REINSTALL_RETRY_CEILING = 8.0


class SouthboundError(RuntimeError):
    """A switch that cannot be programmed; the message names the switch."""


@dataclass(frozen=True)
class SwitchTarget:
    """Where a switch's P4Runtime server listens."""

    name: str
    address: str
    device_id: int = 1
    # TLS (controller/southbound/tls.py); None: plain text
    credentials: GRPCCredentialsTLS | None = None


@dataclass
class InaSwitchDriver:
    """Keeps one switch programmed with `program` across reconnects."""

    target: SwitchTarget
    program: SwitchProgram
    p4info: Path = P4INFO
    p4blob: Path = EMBEDDED_BLOB
    election_id: int = 10  # P4Runtime arbitration: finsy's default
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    pushes: list[float] = field(default_factory=list)  # seconds per (re)install
    problems: list[str] = field(default_factory=list)
    previous: SwitchProgram | None = None
    ready_at: float | None = None  # time.monotonic() of the last completed (re)install
    # Called after every (re)install and whenever the switch is lost, e.g. to publish the
    # controller's state at once.
    on_programmed: Callable[[], None] | None = None
    # The program is on the switch as far as the controller knows: set by a verified install,
    # cleared when the channel drops or the switch stops answering (`poll`).
    installed: bool = False
    responsive: bool = False  # the last liveness read was answered in time
    # time.monotonic() of the switch's last sign of life: a read answered (late or not), its
    # channel coming up, or a packet-in (`heard`). A hung switch keeps its channel up and
    # answers nothing.
    answered_at: float = field(default_factory=time.monotonic)
    failure: str | None = None  # why finsy's last connection cycle failed (see FailureReports)
    failure_code: GRPCStatusCode | None = None
    failure_repeats: int = 0  # consecutive cycles that failed with that same reason
    role: str = "none"  # "primary" or "backup" on the switch's channel, "none" while down
    writes: list[int] = field(default_factory=list)  # updates written per reconcile
    switch: Switch = field(init=False)
    started: float = field(default_factory=time.monotonic)
    _reading: asyncio.Task | None = field(default=None, init=False, repr=False)
    # The last reinstall failed on an answer a retry may change (`_reinstall_later`).
    install_failed_transiently: bool = False
    _retrying: asyncio.Task | None = field(default=None, init=False, repr=False)
    _installing: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        options = SwitchOptions(
            p4info=self.p4info,
            p4blob=self.p4blob,
            device_id=self.target.device_id,
            ready_handler=self._on_ready,
            channel_credentials=self.target.credentials,
            initial_election_id=self.election_id,
        )
        self.switch = Switch(self.target.name, self.target.address, options)
        self.switch.ee.on(SwitchEvent.CHANNEL_DOWN, self._on_down)
        self.switch.ee.on(SwitchEvent.CHANNEL_UP, self._on_up)
        FAILURES.drivers[self.target.name] = self

    @property
    def programmed(self) -> bool:
        """True only while the switch is connected, answers, and holds the verified program."""
        return self.installed and self.responsive and self.switch.is_up and not self.problems

    @property
    def definitive_failure(self) -> bool:
        """finsy's retries cannot help: the switch gave the same non-transient answer twice."""
        return (
            self.failure_code is not None
            and self.failure_code not in TRANSIENT
            and self.failure_repeats >= 2
        )

    def _on_up(self, _switch: Switch) -> None:
        self.answered_at = time.monotonic()

    def heard(self) -> None:
        """A packet-in arrived from the switch: it is alive, if perhaps too busy to answer a
        read in time. Measured (RELIABILITY.md section 1): at 10 % reordering on every link of
        ARO Fig. 1 and a 4 MB gradient, CPU-starved embedded switches left reads unanswered for
        over 10 s while forwarding, and were failed and re-planned around 3 times in 154 s."""
        self.answered_at = time.monotonic()

    def _on_down(self, _switch: Switch) -> None:
        self.installed = self.responsive = False
        self.role = "none"
        if self._reading is not None:  # a read on the old channel: the next poll starts anew
            self._reading.cancel()
            self._reading = None
        if self._retrying is not None:  # the reconnect's ready handler reconciles instead
            self._retrying.cancel()
            self._retrying = None
        LOG.warning(
            "%s: P4Runtime channel down; the switch is not programmed until it is back",
            self.target.name,
        )
        if self.on_programmed:
            self.on_programmed()

    def failed(self, code: GRPCStatusCode | None, reason: str) -> bool:
        """finsy's connection cycle failed with `reason`; True when it is a new reason."""
        new = reason != self.failure
        self.failure_repeats = 1 if new else self.failure_repeats + 1
        self.failure, self.failure_code = reason, code
        return new

    async def poll(self, timeout: float) -> dict[str, list[int]] | None:
        """The switch's counters, read with a deadline; None (and not `responsive`) when the
        switch is down or does not answer in time: a hung switch keeps its TCP connection
        open, so only an answered request proves it alive.

        A read that misses the deadline is not cancelled: the next poll waits for it rather
        than start another (finsy gives up on it after 10 s), and its late answer still
        counts in `answered_at`, which tells a slow switch from a hung one."""
        if not self.switch.is_up:
            self.responsive = False
            return None
        if self._reading is None or self._reading.done():
            self._reading = asyncio.create_task(self._read_counters())
        reading = self._reading
        done, _ = await asyncio.wait({reading}, timeout=timeout)
        counters = reading.result() if done and not reading.cancelled() else None
        if counters is None:
            if self.responsive:
                LOG.warning(
                    "%s does not answer (%s): not programmed until it does",
                    self.target.name,
                    "an error" if done else "TimeoutError",
                )
            self.responsive = False
            return None
        self.responsive = True
        return counters

    async def _read_counters(self) -> dict[str, list[int]] | None:
        try:
            counters = await read_counters(self.switch)
        except P4ClientError:
            return None
        self.answered_at = time.monotonic()
        return counters

    async def move_to(self, program: SwitchProgram, *, write: bool = True) -> None:
        """Make: install `program` beside the current one (new keys inserted, shared keys
        modified); the current program's own entries stay until `retire_previous`. Without
        `write` (a failed switch, planned around) only the program changes: `reinstall`
        brings the switch to it."""
        async with self._installing:  # never between a reconnect's read-back and its writes
            inserts, modifies, _ = diff_programs(self.program, program)
            self.previous, self.program = self.program, program

            async def make() -> None:
                await self.switch.insert(inserts)
                await self.switch.modify(modifies)

            failed = write and await self._failed_to("install the new plan's entries", make)
        if failed:
            await self._reconcile_after_failed_write()

    async def retire_previous(self, *, write: bool = True) -> None:
        """Break: delete what only the previous program had (see `move_to` for `write`)."""
        if self.previous is None:
            return
        async with self._installing:
            _, _, deletes = diff_programs(self.previous, self.program)
            self.previous = None

            async def tear_down() -> None:
                await self.switch.delete(reversed(deletes))  # tables before the groups they use

            failed = write and await self._failed_to("delete the old plan's entries", tear_down)
        if failed:
            await self._reconcile_after_failed_write()

    async def _failed_to(self, what: str, write: Callable[[], Awaitable[None]]) -> bool:
        """Run `write` if the switch holds the plan as this primary installed it; True if it
        failed (logged). A switch that restarts or drops its channel mid-write must stop
        neither the re-plan nor the daemon that writes.

        A switch that is not `installed` (down, a backup's, or reconnecting: finsy reports the
        channel up while it still pushes the pipeline) gets nothing now: its ready handler
        reconciles it with the program. Writing there raced the pipeline push: a bmv2 that
        restarted as a re-plan retired the old plan's entries refused the delete (no pipeline
        yet) and then never came back (the bmv2 long-run test, RELIABILITY.md section 6)."""
        if not self._holds_our_plan:
            return False
        try:
            with call_cancelled_as_error():
                await write()
        except (P4ClientError, CallCancelled) as exc:
            LOG.warning(
                "%s: could not %s (%s); reconciling it with the plan", self.target.name, what, exc
            )
            return True
        return False

    async def _reconcile_after_failed_write(self) -> None:
        """A write to an installed switch failed. If its channel went down meanwhile
        (`_on_down` cleared `installed`), its reconnect reconciles; if the channel stayed up
        (a refused or lost write), reconcile now."""
        if self._holds_our_plan:
            await self.reinstall()

    @property
    def _holds_our_plan(self) -> bool:
        """Up, this controller primary, and the plan installed by it since the channel came
        up (`installed` is cleared when it drops): the only state in which a re-plan writes."""
        return self.installed and self.switch.is_up and self.switch.is_primary

    async def preempt(self) -> None:
        """Advertise an election id above the current primary's: the switch makes this
        client primary, and finsy's ready handler then reconciles (`_on_ready`). For a hung
        primary whose stream the switch keeps (`daemon._watch_primary`). finsy 0.30 has no
        public call to bid again on an open stream; its arbitrator's is used."""
        if not self.switch.is_up or self.switch.is_primary:
            return
        arbitrator = self.switch._arbitrator
        arbitrator.election_id = self.switch.primary_id + 1
        # A channel that drops meanwhile arbitrates anew when it reconnects.
        with contextlib.suppress(P4ClientError, CallCancelled), call_cancelled_as_error():
            await arbitrator._send(self.switch)

    async def _on_ready(self, sw: Switch) -> None:
        if not sw.is_primary:
            # Another controller is primary: stand by (reads only) until the switch makes
            # this one primary, which runs this handler again.
            self.role, self.installed = "backup", False
            self.responsive = True
            LOG.info(
                "%s: backup (election id %d, primary's %d)", sw.name, sw.election_id, sw.primary_id
            )
            self.ready.set()
            if self.on_programmed:
                self.on_programmed()
            return
        self.role = "primary"
        await self.reinstall()

    async def reinstall(self) -> None:
        """Make the switch hold `program` (reconcile), read it back and report. Run on every
        (re)connection as primary, and by the daemon for a switch back from a hang: its
        channel stayed up, so nothing else brings it the plans it missed."""
        async with self._installing:
            sw, started = self.switch, time.perf_counter()
            try:
                with call_cancelled_as_error():
                    self.writes.append(await reconcile(sw, self.program))
            except (P4ClientError, CallCancelled) as exc:
                first = (
                    next(iter(exc.details.values()), None)
                    if isinstance(exc, P4ClientError)
                    else None
                )
                reason = first.message if first else str(exc)
                self.problems = [f"{sw.name} refused the plan's entries: {reason}"]
                self.installed = False
                self.ready.set()
                code = exc.code if isinstance(exc, P4ClientError) else GRPCStatusCode.CANCELLED
                self.install_failed_transiently = code in TRANSIENT
                if self.install_failed_transiently and self._retrying is None:
                    self._retrying = asyncio.create_task(self._reinstall_later())
                return
            self.problems = await verify(sw, self.program)
        self.pushes.append(time.perf_counter() - started)
        self.ready_at = time.monotonic()
        self.installed = self.responsive = True
        self.install_failed_transiently = False
        self.answered_at = time.monotonic()
        self.failure = self.failure_code = None
        self.failure_repeats = 0
        LOG.info(
            "%s programmed: %d entities in %.3f s%s",
            sw.name,
            len(self.program.entities()),
            self.pushes[-1],
            f", {len(self.problems)} mismatches" if self.problems else "",
        )
        self.ready.set()
        if self.on_programmed:
            self.on_programmed()

    async def _reinstall_later(self) -> None:
        """Reinstall after a transient failure (a busy switch let a read or write time out)
        while the channel stays up: nothing else would, since only a reconnect or a switch
        back from failing runs `reinstall`. Backs off from REINSTALL_RETRY_SECONDS to
        REINSTALL_RETRY_CEILING until a reinstall succeeds or fails for good; a channel that
        drops ends it (`_on_down`: the reconnect reconciles)."""
        wait = REINSTALL_RETRY_SECONDS
        try:
            while self.switch.is_up and self.switch.is_primary and self.install_failed_transiently:
                await asyncio.sleep(wait)
                LOG.warning("%s: reinstalling (%s)", self.target.name, "; ".join(self.problems))
                await self.reinstall()
                wait = min(2 * wait, REINSTALL_RETRY_CEILING)
        finally:
            if self._retrying is asyncio.current_task():
                self._retrying = None


class FailureReports(logging.Filter):
    """Turns finsy's report of a failed switch task into one line per new reason.

    finsy logs every failed connection cycle with its traceback and retries (every 0.5 s
    here, see `_RECONNECT_THROTTLE_SECONDS`), so a switch with a wrong device id floods the
    log. finsy has no hook for these failures other than its log, so this filter on the
    "finsy" logger reads them there: it hands the reason to the switch's driver (the daemon
    reports it and gives up at once on a definitive one) and lets a reason through only the
    first time, without the traceback.
    """

    def __init__(self) -> None:
        super().__init__()
        self.drivers: dict[str, InaSwitchDriver] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        task = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        named = re.match(r"fy:([^|]+)\|", task)
        if exc is None or named is None or "Switch task" not in str(record.msg):
            return True
        code = exc.code if isinstance(exc, P4ClientError) else None
        reason = (
            f"{exc.code.name}: {exc.message}"
            if isinstance(exc, P4ClientError)
            else f"{type(exc).__name__}: {exc}"
        )
        driver = self.drivers.get(named.group(1))
        if driver is not None and not driver.failed(code, reason):
            return False
        record.msg, record.args = (
            "switch %s: connection failed (%s); retrying",
            (named.group(1), reason),
        )
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


FAILURES = FailureReports()
logging.getLogger("finsy").addFilter(FAILURES)


def check_fits(program: SwitchProgram, p4info: Path = P4INFO) -> list[str]:
    """Tables the program would overflow, per the P4Info's table sizes."""
    from finsy import P4Schema

    schema = P4Schema(p4info)
    counts: dict[str, int] = {}
    for entry in program.table_entries:
        counts[entry.table_id] = counts.get(entry.table_id, 0) + 1
    return [
        f"{program.switch}: the plan needs {n} entries in table {table}, which holds "
        f"{schema.tables[table].size}"
        for table, n in sorted(counts.items())
        if 0 < schema.tables[table].size < n
    ]


def _key(entity) -> tuple:
    """What identifies an entity on the switch (P4Runtime's key), its action aside."""
    if isinstance(entity, P4TableEntry):
        assert entity.match is not None  # every table of ina.p4 has a key
        return ("table", entity.table_id, tuple(sorted(entity.match.items())))
    if isinstance(entity, P4MulticastGroupEntry):
        return ("group", entity.multicast_group_id)
    return ("clone", entity.session_id)


def _read(sw: Switch, entity: Any) -> AsyncIterator[Any]:
    """`sw.read(entity)`: finsy's overloads type it as a coroutine; it is an async generator."""
    return sw.read(entity)  # type: ignore[return-value]


async def reconcile(sw: Switch, program: SwitchProgram) -> int:
    """Make the switch hold exactly `program`, writing only what differs from what it holds
    (read back); returns the number of updates written. Order: new multicast groups and clone
    sessions before the table entries using them, deletions of table entries before the
    groups they used."""
    held = [e async for e in _read(sw, P4TableEntry())]
    held += [e async for e in _read(sw, P4MulticastGroupEntry())]
    held += [e async for e in _read(sw, P4CloneSessionEntry())]
    found = _fingerprints(sw, held)
    wanted = _fingerprints(sw, program.entities())
    inserts = [e for k, (_, e) in wanted.items() if k not in found]
    modifies = [e for k, (v, e) in wanted.items() if k in found and found[k][0] != v]
    deletes = [e for k, (_, e) in found.items() if k not in wanted]
    await sw.insert(inserts)
    await sw.modify(modifies)
    await sw.delete(deletes)
    return len(inserts) + len(modifies) + len(deletes)


def _fingerprints(sw: Switch, entities: Iterable) -> dict[tuple, tuple[bytes, P4EntityList]]:
    """Entity by its P4Runtime key → (its whole canonical encoding, the entity). Canonical
    bytes make a read-back entry compare equal to the compiled one (read-write symmetry)."""
    out: dict[tuple, tuple[bytes, P4EntityList]] = {}
    for entity in entities:
        message = entity.encode(sw.p4info)
        if message.WhichOneof("entity") == "table_entry":
            entry = message.table_entry
            entry.ClearField("counter_data")
            key: tuple = (
                "table",
                entry.table_id,
                entry.priority,
                tuple(
                    m.SerializeToString(deterministic=True)
                    for m in sorted(entry.match, key=lambda m: m.field_id)
                ),
            )
        else:
            _sort_replicas(message)
            pre = message.packet_replication_engine_entry
            kind = pre.WhichOneof("type")
            inner = getattr(pre, kind)
            key = (
                kind,
                inner.multicast_group_id if kind == "multicast_group_entry" else inner.session_id,
            )
        out[key] = (message.SerializeToString(deterministic=True), entity)
    return out


def diff_programs(old: SwitchProgram, new: SwitchProgram) -> tuple[list, list, list]:
    """(inserts, modifies, deletes) that turn `old` into `new`, in a safe write order."""
    before = {_key(e): e for e in old.entities()}
    after = {_key(e): e for e in new.entities()}
    inserts = [e for k, e in after.items() if k not in before]
    modifies = [e for k, e in after.items() if k in before and before[k] != e]
    deletes = [e for k, e in before.items() if k not in after]
    return inserts, modifies, deletes


async def verify(sw: Switch, program: SwitchProgram) -> list[str]:
    """Read back tables, multicast groups and clone sessions; describe every difference."""
    problems: list[str] = []
    wanted_tables = canonical(sw, program.table_entries)
    got_tables = canonical(sw, [e async for e in _read(sw, P4TableEntry())])
    problems += _diff(sw.name, "table entry", wanted_tables, got_tables)
    wanted_groups = canonical(sw, program.multicast_groups)
    got_groups = canonical(sw, [e async for e in _read(sw, P4MulticastGroupEntry())])
    problems += _diff(sw.name, "multicast group", wanted_groups, got_groups)
    wanted_clones = canonical(sw, program.clone_sessions)
    got_clones = canonical(sw, [e async for e in _read(sw, P4CloneSessionEntry())])
    problems += _diff(sw.name, "clone session", wanted_clones, got_clones)
    return problems


def canonical(sw: Switch, entities: Iterable) -> set[bytes]:
    """`entities` as bytes that compare equal when a switch holds what was written: counter
    data cleared, a multicast group's replicas in (port, instance) order."""
    out = set()
    for entity in entities:
        message = entity.encode(sw.p4info)
        if hasattr(message, "counter_data"):
            message.ClearField("counter_data")
        _sort_replicas(message)
        out.add(message.SerializeToString(deterministic=True))
    return out


def _sort_replicas(message) -> None:
    """A multicast group's replicas in (port, instance) order: bmv2 keeps a group's replicas
    per instance and reads them back in its own order, and their order means nothing."""
    pre = getattr(message, "packet_replication_engine_entry", None)
    if pre is None or pre.WhichOneof("type") != "multicast_group_entry":
        return
    pre.multicast_group_entry.replicas.sort(key=lambda r: (r.egress_port, r.port, r.instance))


def _diff(switch: str, kind: str, wanted: set[bytes], got: set[bytes]) -> list[str]:
    problems = []
    if missing := len(wanted - got):
        problems.append(f"{switch}: {missing} {kind}(s) written but not read back")
    if extra := len(got - wanted):
        problems.append(f"{switch}: {extra} {kind}(s) read back that were not written")
    return problems


async def read_counters(sw: Switch) -> dict[str, list[int]]:
    """Packet counts per cell of every INA counter (per pipeline; `forged` per job)."""
    counts: dict[str, list[int]] = {}
    for name in COUNTERS:
        cells: dict[int, int] = {}
        async for entry in _read(sw, P4CounterEntry(name)):
            cells[entry.index] = entry.data.packet_count if entry.data else 0
        counts[name] = [cells[i] for i in sorted(cells)]
    return counts
