"""`ina controller`: solve, compile, push to every switch over P4Runtime, verify, publish, watch.

The control channel to the host agents is a JSON state file (documented in README.md): the
plan version, each task's rate, and for every worker the ids it must put in its packets. The
daemon rewrites it atomically whenever something changes and, while it runs, once a second
with the switches' counters, so `ina status` and the Mininet runner only ever read a file.

A switch counts as programmed only while its channel is up and it answers the once-a-second
counter read within `POLL_TIMEOUT`: a switch that dies or hangs shows as not programmed in
the state file within about a second. SIGTERM stops the daemon like SIGINT: the state file's
last version says the controller stopped, when and why.

Reconciliation after a switch restart, or after this controller takes over from a failed
primary (P4Runtime arbitration, `--election-id`), is finsy's reconnect plus the driver's ready
handler, which writes only what the switch lacks or holds wrongly and logs how long it took
(`pushes_seconds`) and how many updates it wrote (`writes`). A backup controller keeps its
own state file with every switch's `role` "backup" until it takes over.

With `--api`, jobs also arrive and leave while the daemon runs (`controller.service.api`,
`controller.service.jobs`): every job keeps its own ids (the compiler's JobLayout), and each
change of the plan in force (a job admitted or ended, a re-plan) holds the session's `changing`
lock, so each starts from the plan the previous one left.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
from finsy import Controller

from controller.compiler.program import Layout, compile_plan
from controller.model.network import Network, TopologyError, load_topology
from controller.model.plan import Plan
from controller.southbound.discovery import LinkMonitor
from controller.southbound.p4runtime import (
    EMBEDDED_BLOB,
    P4INFO,
    InaSwitchDriver,
    SouthboundError,
    SwitchTarget,
    check_fits,
)
from controller.southbound.tls import certificate_problem

LOG = logging.getLogger(__name__)
POLL_INTERVAL = 1.0  # seconds between counter reads (which double as liveness checks)
POLL_TIMEOUT = 0.5  # a switch that takes longer to answer them counts as not programmed
FULL_GC_SECONDS = 30.0  # between full garbage collections (`_publish_counters`)


class SwitchesFileError(ValueError):
    """The switches file is unreadable or malformed; the message names the file and field."""


@dataclass
class Session:
    """What the daemon drives: the network, the current plan and one driver per switch."""

    network: Network
    plan: Plan
    targets: dict[str, SwitchTarget]
    state_file: Path
    p4blob: Path | None = None
    p4info: Path | None = None
    election_id: int = 10  # P4Runtime: the live controller with the highest is primary
    version: int = 1
    drivers: dict[str, InaSwitchDriver] = field(default_factory=dict)
    counters: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    dead_links: set[tuple[str, str]] = field(default_factory=set)
    # Switches whose P4Runtime channel has been down, or that have answered no read (a hung
    # process keeps its channel up), for longer than `switch_grace` seconds: planned around,
    # every link at once, and left out of the re-plans' writes until they are back. A restart
    # of an embedded switch under load took 4.6-5.8 s from kill to listening again
    # (RELIABILITY.md section 6): within the grace it keeps the plan and only gets its
    # entries back.
    failed_switches: set[str] = field(default_factory=set)
    switch_grace: float = 10.0
    replans: list[dict] = field(default_factory=list)
    replan_failures: list[dict] = field(default_factory=list)
    # The link monitor's rounds so far, how often port counters kept a link whose probes
    # were lost alive, and link-rounds left undecided (discovery.LinkMonitor.stats).
    link_monitor: dict = field(default_factory=dict)
    # Seconds between publishing a new plan to the hosts and deleting the old plan's entries:
    # long enough for every worker to have switched and for in-flight fragments to drain.
    drain_seconds: float = 2.0
    # The OpenFlow app's state file when plain switches run as Open vSwitch: a new version is
    # staged for the app and published to the hosts once the app reports it installed.
    openflow_state: Path | None = None
    openflow_timeout: float = 10.0
    staged: dict | None = None
    # Set when the operator's topology file cannot be used (deleted, unreadable, invalid):
    # the plan in force stays, and the file is read again whenever it changes.
    topology_problem: dict | None = None
    stopped: dict | None = None  # {"at": time, "reason": "SIGTERM"} once the daemon stops
    # A backup's watch on the primary controller (its state file, `_watch_primary`): written
    # every POLL_INTERVAL while it runs, so a file older than `primary_stale` seconds that
    # still says "running" is a hung primary.
    watch_primary: Path | None = None
    primary_stale: float = 5.0
    preemptions: list[dict] = field(default_factory=list)
    # The switches as last seen connected, kept once the daemon lets go of them (stopping):
    # they keep their entries, and a reader must not take the goodbye for a failure.
    last_seen: dict | None = None
    # Jobs at run time (`ina controller --api`): each job's own ids (compiler JobLayout), the
    # job service (controller.service.jobs) and the API's address. Changes of the plan in force
    # (a job admitted or ended, a re-plan) hold `changing`, one at a time.
    layout: Layout | None = None
    jobs: Any = None
    api_server: Any = None  # serves the API (`serve()`) once the first plan is installed
    api_address: str | None = None
    api_url: str | None = None  # http:// or https:// (`--api-cert`) and the address
    changing: asyncio.Lock = field(default_factory=asyncio.Lock)
    # every port's `mark_threshold` (p4src/README.md); None: half of each port's own queue
    mark_depth: int | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.targets) - set(self.network.switches))
        if unknown:
            raise SouthboundError(f"switches file names unknown switch(es): {', '.join(unknown)}")
        programs, self.assignments = compile_plan(
            self.network, self.plan, layout=self.layout, mark_depth=self.mark_depth
        )
        p4info = self.p4info or P4INFO
        too_big = [p for name in self.targets for p in check_fits(programs[name], p4info)]
        if too_big:
            raise SouthboundError("the plan does not fit the switches: " + "; ".join(too_big))
        self.drivers = {
            name: InaSwitchDriver(
                target,
                programs[name],
                on_programmed=self._republish,
                election_id=self.election_id,
                p4info=p4info,
                p4blob=self.p4blob or EMBEDDED_BLOB,
            )
            for name, target in self.targets.items()
        }
        self.started = False

    def _republish(self) -> None:
        """A switch was (re)programmed or lost: tell readers now, once the first install is
        done."""
        if self.started:
            self.publish()

    def state(self) -> dict:
        return {
            "version": self.version,
            "written_at": time.time(),
            "topology": self.network.name,
            "plan": self.plan.to_dict(),
            "workers": [asdict(a) for a in self.assignments],
            "dead_links": sorted(self.dead_links),
            "failed_switches": sorted(self.failed_switches),
            "replans": self.replans,
            "replan_failures": self.replan_failures,
            "link_monitor": self.link_monitor,
            "staged": self.staged,
            "controller": {
                "pid": os.getpid(),
                "running": self.stopped is None,
                **({"stopped": self.stopped} if self.stopped else {}),
            },
            "topology_problem": self.topology_problem,
            "preemptions": self.preemptions,
            "switches": self.last_seen or self.switches(),
            **(
                {
                    "jobs": self.jobs.summary(),
                    "api": {"address": self.api_address, "url": self.api_url},
                }
                if self.jobs is not None
                else {}
            ),
        }

    def switches(self) -> dict:
        """Each switch as the controller sees it now."""
        return {
            name: {
                "address": d.target.address,
                "device_id": d.target.device_id,
                "programmed": d.programmed,
                "role": d.role,
                "connected": d.switch.is_up,
                "answering": d.responsive,
                "failure": d.failure,
                "pushes_seconds": d.pushes,
                "writes": d.writes,
                "problems": d.problems,
                "counters": self.counters.get(name, {}),
            }
            for name, d in self.drivers.items()
        }

    def publish(self) -> None:
        """Write the state file atomically (readers never see half a file).

        Compact JSON, written by the json module's C encoder: with `indent` it falls back to
        its Python encoder, whose closures form reference cycles; written once a second, some
        were promoted to the oldest generation, which CPython collects rarely, and the
        daemon's memory crept by about 1 kB/s (RELIABILITY.md section 6). `ina status` or
        `python -m json.tool` shows the file indented."""
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state()) + "\n")
        os.replace(tmp, self.state_file)


async def replan(session: Session, dead: set[tuple[str, str]]) -> None:
    """Re-plan every job around dead links and move traffic make-before-break.

    The new plan is warm-started from the current one and compiled as the next version (its
    own flow ids, tags and slot region); its entries are installed beside the old ones, then
    the hosts are told (state file), and only after the drain time are the old ones deleted.
    """
    async with session.changing:
        await _replan(session, dead)


async def _replan(session: Session, dead: set[tuple[str, str]]) -> None:
    from controller.solvers import SolveOptions, solve

    started = time.perf_counter()
    session.dead_links = set(dead)
    view = session.network.without_links(session.dead_links)
    try:
        plan = solve(
            view,
            session.plan.scheme,
            SolveOptions(warm_start=session.plan, params=session.plan.details.get("params", {})),
        )
        programs, assignments = compile_plan(
            view,
            plan,
            version=session.version + 1,
            layout=session.layout,
            mark_depth=session.mark_depth,
        )
    except Exception as exc:  # whatever the scheme raises, the daemon lives on
        # No plan for what is left (a PS cut off, say): keep the current one and keep watching;
        # the next change of the dead links, or a capacity edit, tries again.
        session.replan_failures.append(
            {"dead_links": sorted(session.dead_links), "error": str(exc), "at": time.time()}
        )
        session.publish()
        LOG.error(
            "cannot re-plan around dead links %s: %s; plan v%d stays in place",
            sorted(session.dead_links),
            exc,
            session.version,
        )
        return
    solved = time.perf_counter()
    for name, driver in session.drivers.items():
        await driver.move_to(programs[name], write=name not in session.failed_switches)
    await stage_for_plain_switches(session, plan, session.version + 1)
    session.version += 1
    session.plan, session.assignments = plan, assignments
    if session.jobs is not None:
        session.jobs.replanned()
    session.publish()
    installed = time.perf_counter()
    await asyncio.sleep(session.drain_seconds)
    for name, driver in session.drivers.items():
        await driver.retire_previous(write=name not in session.failed_switches)
    session.replans.append(
        {
            "version": session.version,
            "dead_links": sorted(session.dead_links),
            "solve_seconds": solved - started,
            "install_seconds": installed - solved,
            "rate_gbps": [t.rate_gbps for t in plan.tasks],
        }
    )
    session.publish()
    # A CP-SAT solve leaves reference cycles (about 3 kB per solve, RELIABILITY.md section 6)
    # that only a full collection frees; CPython runs those rarely in a long-lived process.
    gc.collect()
    LOG.info(
        "re-planned around %s: plan v%d, %.3f s to solve and install",
        sorted(session.dead_links),
        session.version,
        installed - started,
    )


async def stage_for_plain_switches(session: Session, plan: Plan, version: int) -> None:
    """Hand `plan` as `version` to the OpenFlow app before the hosts see it, and wait until
    the plain switches hold it: a host must never send a flow id they would drop
    (controller/southbound/openflow/follow.py). Bounded: a dead app must not freeze the network."""
    if session.openflow_state is None:
        return
    session.staged = {
        "version": version,
        "plan": plan.to_dict(),
        "dead_links": sorted(session.dead_links),
    }
    session.publish()
    deadline = time.monotonic() + session.openflow_timeout
    while _openflow_version(session.openflow_state) != version:
        if time.monotonic() > deadline:
            LOG.warning(
                "plain switches did not confirm plan v%d within %g s: publishing it anyway",
                version,
                session.openflow_timeout,
            )
            break
        await asyncio.sleep(0.02)
    session.staged = None


def _openflow_version(path: Path) -> int:
    try:
        return int(json.loads(path.read_text()).get("version", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


async def run(
    session: Session,
    *,
    connect_timeout: float = 15.0,
    once: bool = False,
    probe_interval: float | None = 0.5,
) -> None:
    """Program every switch, verify, publish; then keep them programmed, watch the links
    (probes every `probe_interval` s; None: no link monitoring) and re-plan around dead ones,
    until cancelled or stopped by SIGTERM or SIGINT, which return normally after the state
    file has said so. The switches keep their entries: a controller restart finds them."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    caught: list[str] = []

    def stop(sig: signal.Signals) -> None:
        caught.append(sig.name)
        task.cancel()

    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop, sig)
        except (RuntimeError, ValueError):  # not the main thread: the caller handles signals
            continue
        handled.append(sig)
    try:
        await _serve(session, connect_timeout, once, probe_interval)
    except asyncio.CancelledError:
        if not caught:
            raise
        task.uncancel()
        session.stopped = {"at": time.time(), "reason": caught[0]}
        LOG.info("stopped by %s", caught[0])
    else:
        session.stopped = {"at": time.time(), "reason": "--once" if once else "done"}
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
    if session.started:
        session.publish()


async def _serve(
    session: Session, connect_timeout: float, once: bool, probe_interval: float | None
) -> None:
    async with Controller([d.switch for d in session.drivers.values()]):
        try:
            await _program_and_watch(session, connect_timeout, once, probe_interval)
        finally:
            session.last_seen = session.switches()


async def _program_and_watch(
    session: Session, connect_timeout: float, once: bool, probe_interval: float | None
) -> None:
    await _wait_programmed(session, connect_timeout)
    mismatches = [p for d in session.drivers.values() for p in d.problems]
    if mismatches:
        raise SouthboundError("; ".join(mismatches))
    session.started = True
    session.publish()
    backups = sorted(n for n, d in session.drivers.items() if d.role == "backup")
    LOG.info(
        "plan v%d installed on %d switch(es)%s",
        session.version,
        len(session.drivers) - len(backups),
        f"; backup on {', '.join(backups)} (another controller is primary)" if backups else "",
    )
    if once:
        return
    async with asyncio.TaskGroup() as group:
        group.create_task(_publish_counters(session))
        group.create_task(_watch_capacities(session))
        if probe_interval is not None:
            group.create_task(_watch_links(session, probe_interval))
        if session.api_server is not None:
            group.create_task(session.api_server.serve())
        if session.watch_primary is not None:
            group.create_task(_watch_primary(session))


async def _watch_primary(session: Session) -> None:
    """Take over from a hung primary controller.

    A primary that hangs without exiting keeps its TCP connection, and a switch that does not
    ping its clients (bmv2) keeps it primary for hours (RELIABILITY.md section 3). Its state
    file shows the hang: a running daemon rewrites it every POLL_INTERVAL. When it says
    running but is older than `primary_stale`, this backup advertises an election id above
    the primary's on every switch where it stands by (P4Runtime arbitration: the highest
    live id is primary), then reconciles as any new primary does: a switch that holds the
    plan gets no write. A primary that stopped cleanly says so (`running` false) and is not
    preempted: its streams are closed, and the switch makes the backup primary by itself.
    """
    assert session.watch_primary is not None
    while True:
        await asyncio.sleep(POLL_INTERVAL)
        age = primary_hung_for(session.watch_primary, session.primary_stale)
        if age is None:
            continue
        backups = [d for d in session.drivers.values() if d.role == "backup"]
        for driver in backups:
            await driver.preempt()
        if backups:
            session.preemptions.append(
                {
                    "at": time.time(),
                    "primary_silent_seconds": age,
                    "switches": sorted(d.target.name for d in backups),
                }
            )
            LOG.warning(
                "the primary controller's state file is %.1f s old while it says "
                "running: taking over %s",
                age,
                ", ".join(d.target.name for d in backups),
            )
            session.publish()


def primary_hung_for(state_file: Path, stale: float) -> float | None:
    """Seconds since the primary controller last wrote `state_file`, if that is more than
    `stale` while the file says it runs; None otherwise (fresh, stopped cleanly, or no
    readable file: no evidence of a hang)."""
    try:
        state = json.loads(state_file.read_text())
        written, running = state["written_at"], state["controller"]["running"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    age = time.time() - written
    return age if running and age > stale else None


async def _watch_capacities(session: Session, interval: float = 1.0) -> None:
    """Re-plan when the operator edits the topology file's capacities.

    The file is the controller's source of link and aggregator capacities; a valid edit that
    keeps the same nodes and links replaces them, and the plan follows (warm-started, make-
    before-break). A file that is deleted, unreadable or invalid changes nothing: the plan in
    force stays, the problem goes to the log and the state file (`topology_problem`), and the
    file is read again each time it changes until it is usable.
    """
    path = Path(session.network.source)
    if not path.is_file():
        return
    stamp = _stamp(path)
    while True:
        await asyncio.sleep(interval)
        if _stamp(path) == stamp:
            continue
        stamp = _stamp(path)
        problem = None
        try:
            edited = load_topology(path)
        except TopologyError as exc:
            problem = str(exc)
        except Exception as exc:  # an operator's file must never stop the daemon
            problem = f"{path}: cannot be loaded ({type(exc).__name__}: {exc})"
        else:
            if set(edited.graph.edges) != set(session.network.graph.edges):
                problem = (
                    f"{path}: the edit changes nodes or links, which needs a restart "
                    "of the controller"
                )
        if problem is not None:
            LOG.warning(
                "ignoring the edited topology, plan v%d stays: %s", session.version, problem
            )
            session.topology_problem = {"error": problem, "at": time.time()}
            session.publish()
            continue
        if session.topology_problem is not None:
            session.topology_problem = None
            session.publish()
        if session.jobs is not None:
            edited = session.jobs.merged(edited)
        if _same_network(edited, session.network):
            continue  # restored as it was (or only reformatted): the plan stands
        LOG.info("capacities changed in %s: re-planning", path)
        async with session.changing:
            session.network = edited
        await replan(session, session.dead_links)


def _same_network(a: Network, b: Network) -> bool:
    return (
        nx.utils.graphs_equal(a.graph, b.graph)
        and a.tasks == b.tasks
        and a.schemes == b.schemes
        and a.jobs_beta == b.jobs_beta
    )


def _stamp(path: Path) -> tuple[int, int] | None:
    """What tells that the file changed: (mtime, size), None while it does not exist."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


async def _publish_counters(session: Session) -> None:
    """Read every switch's counters at once, each with a deadline (a hung switch must not
    hold up the others' state), and publish; a switch that did not answer is not programmed.

    Also runs a full garbage collection every `FULL_GC_SECONDS`: CPython starts one only once
    the objects surviving younger collections reach a quarter of the long-lived ones (twice
    in 15 idle minutes here), and a full one is also what empties the interpreter's free
    lists; without it (and with the old indented state file) the idle daemon's Python blocks
    grew ~6 a second and its RSS ~0.8 kB/s, with both fixes they stay flat (`ina bench
    reliability --item idle-memory`, RELIABILITY.md section 6). One costs tens of ms."""
    collected = time.monotonic()
    while True:
        await asyncio.sleep(POLL_INTERVAL)
        if time.monotonic() - collected >= FULL_GC_SECONDS:
            gc.collect()
            collected = time.monotonic()
        names = list(session.drivers)
        results = await asyncio.gather(*(session.drivers[n].poll(POLL_TIMEOUT) for n in names))
        for name, counters in zip(names, results, strict=True):
            if counters is not None:
                session.counters[name] = counters
        session.publish()


async def _watch_links(
    session: Session, interval: float, dead_after: int = 2, revive_after: int = 4
) -> None:
    """Re-plan whenever the set of unusable links changes: links the monitor judged dead,
    and every link of a failed switch (`failed_switches`; a switch failure is one event:
    all its links at once).

    A switch back within the grace (a restart) keeps the plan: its reconnect reinstalls its
    entries. A failed switch that is back with the channel it had (a hang that ended) gets
    the plan it missed before the re-plan that uses it again. While a switch is away the
    monitor leaves its links undecided, so a restart does not show as a dead link either.
    """
    monitor = LinkMonitor(
        [d.switch for d in session.drivers.values()],
        session.network,
        interval=interval,
        dead_after=dead_after,
        revive_after=revive_after,
        on_heard=lambda name: session.drivers[name].heard(),
    )
    monitor_task = asyncio.create_task(monitor.run())
    down_since: dict[str, float] = {}
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await monitor.changed.wait()
            monitor.changed.clear()
            session.link_monitor = monitor.stats()
            failed = failed_switches(session, down_since, time.monotonic())
            dead = unusable_links(session.network, monitor.dead_links(), failed)
            if failed != session.failed_switches:
                LOG.warning(
                    "switches failed (P4Runtime channel down, or no answer, for more "
                    "than %g s): %s",
                    session.switch_grace,
                    sorted(failed) or "none",
                )
                back = session.failed_switches - failed
                session.failed_switches = failed
                for name in sorted(back):
                    driver = session.drivers[name]
                    if driver.installed:  # not reconnected since its last install
                        await driver.reinstall()
            if dead != session.dead_links:
                await replan(session, dead)
    finally:
        monitor_task.cancel()


def failed_switches(session: Session, down_since: dict[str, float], now: float) -> set[str]:
    """Switches away for longer than the grace: channel down, or channel up but no read
    answered and no packet-in (`InaSwitchDriver.answered_at`: a hung switch keeps its TCP
    connection, so only an answer or a message from it proves it alive). `down_since`
    (switch -> when its channel went down) is kept up to date across calls."""
    for name, driver in session.drivers.items():
        if driver.switch.is_up:
            down_since.pop(name, None)
        else:
            down_since.setdefault(name, now)
    return {
        name
        for name, driver in session.drivers.items()
        if now - down_since.get(name, driver.answered_at) > session.switch_grace
    }


def unusable_links(
    network: Network, dead: Iterable[tuple[str, str]], failed: set[str]
) -> set[tuple[str, str]]:
    """Links (sorted pairs) to plan around: both directions of every dead directed link,
    and every link of a failed switch."""
    links = {_sorted_pair(*edge) for edge in dead}
    links |= {_sorted_pair(*edge) for edge in network.graph.edges if set(edge) & failed}
    return links


def _sorted_pair(u: str, v: str) -> tuple[str, str]:
    return (u, v) if u <= v else (v, u)


async def _wait_programmed(session: Session, timeout: float) -> None:
    """Until every switch holds its program; a switch that gave a definitive answer (unknown
    device id, refused pipeline) fails after its second try, one that stays silent after
    `timeout`."""
    deadline = time.monotonic() + timeout
    checked: set[str] = set()
    while pending := {n: d for n, d in session.drivers.items() if not d.ready.is_set()}:
        await _refuse_untrusted(pending, checked)
        refused = {n: d for n, d in pending.items() if d.definitive_failure}
        if refused or time.monotonic() > deadline:
            raise SouthboundError(
                "; ".join(
                    _why_not_programmed(name, driver, timeout)
                    for name, driver in (refused or pending).items()
                )
            ) from None
        await asyncio.sleep(0.05)


async def _refuse_untrusted(pending: dict[str, InaSwitchDriver], checked: set[str]) -> None:
    """A TLS switch still not connected after a second is asked for its certificate once:
    one that does not match is refused at once (gRPC would retry it silently forever)."""
    for name, driver in pending.items():
        credentials = driver.target.credentials
        if credentials is None or name in checked or time.monotonic() - driver.started < 1.0:
            continue
        checked.add(name)
        problem = await asyncio.to_thread(certificate_problem, driver.target.address, credentials)
        if problem:
            raise SouthboundError(f"switch {name} at {driver.target.address} refused: {problem}")


def _why_not_programmed(name: str, driver: InaSwitchDriver, timeout: float) -> str:
    address, device_id = driver.target.address, driver.target.device_id
    if (
        driver.failure_code is not None
        and driver.failure_code.name == "NOT_FOUND"
        and not driver.switch.is_up
    ):
        return (
            f"switch {name} at {address} has no P4Runtime device id {device_id} (it "
            f"answered {driver.failure}); check its device_id in the switches file"
        )
    if driver.failure is not None:
        refused = driver.failure_code is not None and driver.failure_code.name == "INVALID_ARGUMENT"
        hint = (
            "" if refused else (f" (is device_id {device_id} in the switches file the switch's?)")
        )
        return (
            f"switch {name} at {address} accepts connections but did not take the "
            f"pipeline: {driver.failure}{hint}"
        )
    if _reachable(address):
        return (
            f"switch {name} at {address} accepts connections but did not take the "
            f"pipeline within {timeout:g} s (see the switch's log)"
        )
    return (
        f"switch {name} at {address} cannot be reached (nothing listens there; waited "
        f"{timeout:g} s)"
    )


def _reachable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
    except OSError:
        return False
    return True


def load_targets(path: str | Path) -> dict[str, SwitchTarget]:
    """Switches file: {"S1": {"address": "127.0.0.1:50001", "device_id": 1}, ...}.

    Raises `SwitchesFileError` naming the file, the switch and the field at the first problem.
    """
    try:
        data = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise SwitchesFileError(
            f"{path}: cannot read the switches file ({exc.strerror or exc})"
        ) from None
    except (ValueError, RecursionError) as exc:  # JSON syntax, encoding
        raise SwitchesFileError(f"{path}: the switches file is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise SwitchesFileError(
            f"{path}: the switches file must be a JSON object such as "
            '{"S1": {"address": "127.0.0.1:9559", "device_id": 1}}'
        )
    return {name: _target(path, name, entry) for name, entry in data.items()}


def _target(path: str | Path, name: str, entry: object) -> SwitchTarget:
    where = f"{path}: switch {name!r}"
    if not isinstance(entry, dict):
        raise SwitchesFileError(f"{where}: expected an object with address and device_id")
    unknown = sorted(set(entry) - {"address", "device_id"})
    if unknown:
        raise SwitchesFileError(
            f"{where}: unknown field(s) {', '.join(unknown)} (expected address and device_id)"
        )
    address = entry.get("address")
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if (
        not isinstance(address, str)
        or not host
        or not port.isdigit()
        or not 0 < int(port) < 65536
        or any(c.isspace() for c in host)
    ):
        raise SwitchesFileError(
            f"{where}: field address must be HOST:PORT with a port in "
            f"1..65535 (e.g. 127.0.0.1:9559), got {address!r}"
        )
    device_id = entry.get("device_id", 1)
    if type(device_id) is not int or not 0 <= device_id < 2**64:
        raise SwitchesFileError(
            f"{where}: field device_id must be an integer in 0..2^64-1, got {device_id!r}"
        )
    return SwitchTarget(name, address, device_id)
