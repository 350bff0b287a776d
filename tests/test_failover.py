"""Controller failover (RELIABILITY.md section 3), on both targets.

Two controllers with different election ids drive one switch: the higher is primary, the other
waits as a backup and writes nothing. When the primary goes, the switch has no primary until
the backup advertises an election id at least as high as the highest it has seen (P4Runtime
"Client Arbitration"; finsy's backup does so when told NOT_FOUND); the backup then reads back
what the switch holds and writes only the difference to its own program.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES, program_files, start_portless_switch
from finsy import (
    Controller,
    P4CloneSessionEntry,
    P4MulticastGroupEntry,
    P4TableEntry,
    Switch,
    SwitchOptions,
)

from controller.compiler.program import compile_plan
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from controller.southbound.p4runtime import (
    InaSwitchDriver,
    SwitchTarget,
    canonical,
    diff_programs,
)
from dataplane.targets import KINDS

TOPOLOGY = EXAMPLES / "aro-fig1.yaml"


@pytest.fixture(params=KINDS)
def switch(request):
    """(kind, address) of a switch without ports."""
    process, address = start_portless_switch(request.param)
    yield request.param, address
    process.terminate()
    process.wait(timeout=10)


def _programs(scheme: str):
    network = load_topology(TOPOLOGY)
    plan = solve(network, scheme, SolveOptions(time_limit=20, seed=0))
    return compile_plan(network, plan)[0]["S1"]


async def _held(sw) -> set[bytes]:
    """Everything the switch holds, as canonical bytes (counter data aside)."""
    entities = [e async for e in sw.read(P4TableEntry())]
    entities += [e async for e in sw.read(P4MulticastGroupEntry())]
    entities += [e async for e in sw.read(P4CloneSessionEntry())]
    return canonical(sw, entities)


def _wanted(sw, program) -> set[bytes]:
    return canonical(sw, program.entities())


async def _wait(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_the_backup_writes_nothing_then_takes_over_writing_only_the_difference(switch):
    """Primary A (election id 20) installs the `shortest` plan; backup B (10) holds the `aro`
    plan. While A lives, B writes nothing; once A's channel closes, B becomes primary and
    writes exactly the updates that turn A's program into its own (counted independently by
    `diff_programs`, the make-before-break differ), after which the switch holds B's program."""
    kind, address = switch
    files = program_files(kind)
    old, new = _programs("shortest"), _programs("aro")
    inserts, modifies, deletes = diff_programs(old, new)
    expected = len(inserts) + len(modifies) + len(deletes)
    assert 0 < expected < len(new.entities()), "the plans must differ, but not in everything"
    a = InaSwitchDriver(SwitchTarget("S1", address), old, election_id=20, **files)
    b = InaSwitchDriver(SwitchTarget("S1", address), new, election_id=10, **files)

    async def scenario() -> float:
        async with Controller([b.switch]):
            async with Controller([a.switch]):
                await asyncio.wait_for(a.ready.wait(), 30)
                assert a.role == "primary" and a.writes == [len(old.entities())]
                await _wait(lambda: b.role == "backup")
                await asyncio.sleep(1.0)  # B must stay a backup while A lives
                assert b.role == "backup" and b.writes == [] and not b.installed
                assert await _held(b.switch) == _wanted(b.switch, old)
                b.ready.clear()
                gone = time.perf_counter()
            await asyncio.wait_for(b.ready.wait(), 30)
            took = time.perf_counter() - gone
            assert b.role == "primary" and b.problems == []
            assert await _held(b.switch) == _wanted(b.switch, new)
            return took

    took = asyncio.run(scenario())
    assert b.writes == [expected]
    print(
        f"{kind}: takeover with {expected} writes of {len(new.entities())} entities in {took:.3f} s"
    )


def _controller(
    tmp_path, name: str, address: str, election_id: int, kind: str = "embedded", *options: str
) -> subprocess.Popen:
    """`ina controller` (the default `shortest` plan) for S1 at `address`, with `options`;
    logs in name.log."""
    switches = tmp_path / "switches.json"
    switches.write_text(json.dumps({"S1": {"address": address}}))
    files = (
        [arg for key, path in program_files(kind).items() for arg in (f"--{key}", str(path))]
        if kind == "bmv2"
        else []
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "controller",
            str(TOPOLOGY),
            "--switches",
            str(switches),
            "--state",
            str(tmp_path / f"{name}.json"),
            "--election-id",
            str(election_id),
            "--log-level",
            "info",
            *files,
            *options,
        ],
        stdout=(tmp_path / f"{name}.log").open("ab"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "GRPC_VERBOSITY": "NONE"},
    )


def _state(tmp_path, name: str) -> dict:
    try:
        return json.loads((tmp_path / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def _switch_state(tmp_path, name: str) -> dict | None:
    return _state(tmp_path, name).get("switches", {}).get("S1")


def _until(condition, timeout: float = 30.0) -> float:
    """Seconds until `condition()` holds (polled every 10 ms); fails after `timeout`."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.01)
    return time.monotonic() - start


def test_two_controller_processes_fail_over_without_rewriting_the_switch(tmp_path):
    """`ina controller --election-id 20` and `--election-id 10` on one embedded switch: the
    second stands by; SIGKILL the first and the second is primary with zero writes (the same
    plan is already there). The first, restarted, finds the second primary and stands by."""
    switch, address = start_portless_switch("embedded")
    primary = _controller(tmp_path, "a", address, 20)
    backup = restarted = None
    try:
        _until(lambda: (_switch_state(tmp_path, "a") or {}).get("programmed"))
        backup = _controller(tmp_path, "b", address, 10)
        _until(lambda: (_switch_state(tmp_path, "b") or {}).get("role") == "backup")
        assert _switch_state(tmp_path, "b")["writes"] == []
        primary.send_signal(signal.SIGKILL)
        primary.wait(timeout=10)
        took = _until(lambda: (_switch_state(tmp_path, "b") or {}).get("programmed"))
        state = _switch_state(tmp_path, "b")
        assert state["role"] == "primary" and state["writes"] == [0]
        assert state["problems"] == []
        print(f"takeover after SIGKILL of the primary: {took:.3f} s (state file polled)")
        restarted = _controller(tmp_path, "a", address, 20)
        _until(lambda: (_switch_state(tmp_path, "a") or {}).get("role") == "backup")
        time.sleep(1.0)
        assert _switch_state(tmp_path, "b")["role"] == "primary"
    finally:
        for process in (primary, backup, restarted, switch):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=10)


# The embedded switch drops a client that leaves its HTTP/2 PINGs unanswered for 2 s, pinging
# every second (dataplane/server.py KEEPALIVE_OPTIONS); the bound leaves room for a loaded host.
HUNG_TAKEOVER_BOUND = 10.0


def _holds_plan(kind: str, address: str) -> bool:
    """A third client (a backup, election id 1) reads the switch: does it hold exactly the
    `shortest` plan that every `ina controller` here installs?"""
    files = program_files(kind)

    async def read() -> bool:
        reader = Switch(
            "reader", address, SwitchOptions(p4info=files["p4info"], initial_election_id=1)
        )
        async with reader:
            assert not reader.is_primary
            return await _held(reader) == _wanted(reader, _programs("shortest"))

    return asyncio.run(read())


def _resumed_one_stands_by(tmp_path, resumed: str, primary: str, writes_before: list) -> None:
    """The stopped controller, resumed, finds another primary, stands by and writes nothing;
    the other stays primary."""
    _until(lambda: (_switch_state(tmp_path, resumed) or {}).get("role") == "backup")
    time.sleep(1.0)
    assert _switch_state(tmp_path, resumed)["writes"] == writes_before
    assert _switch_state(tmp_path, resumed)["role"] == "backup"
    assert _switch_state(tmp_path, primary)["role"] == "primary"
    assert _switch_state(tmp_path, primary)["writes"] == [0]


def _primary_and_backup(tmp_path, address: str, kind: str, started: list) -> list:
    """Controller "a" (election id 20) primary and programmed, then "b" (10) standing by, on
    the switch at `address`, each appended to `started` as it starts (for the teardown);
    a's writes so far."""
    started.append(_controller(tmp_path, "a", address, 20, kind))
    _until(lambda: (_switch_state(tmp_path, "a") or {}).get("programmed"))
    started.append(_controller(tmp_path, "b", address, 10, kind))
    _until(lambda: (_switch_state(tmp_path, "b") or {}).get("role") == "backup")
    return _switch_state(tmp_path, "a")["writes"]


def _stop_all(processes) -> None:
    """Terminate what still runs; a stopped process takes SIGTERM only once continued."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            process.wait(timeout=10)


def test_a_stopped_primary_controller_is_replaced_by_the_backup(tmp_path):
    """SIGSTOP the primary `ina controller` (election id 20): its process answers nothing but
    its TCP connection stays open (the kernel acknowledges). The embedded switch closes its
    stream once it leaves the transport's PINGs unanswered, so the backup (10) is primary within
    HUNG_TAKEOVER_BOUND seconds with 0 writes, and the switch holds the plan. SIGCONT: the
    stopped one finds its stream gone, reconnects, finds the id taken, bids lower and stands
    by (P4Runtime: the highest live election id is primary)."""
    switch, address = start_portless_switch("embedded")
    controllers = []
    try:
        writes_a = _primary_and_backup(tmp_path, address, "embedded", controllers)
        a = controllers[0]
        a.send_signal(signal.SIGSTOP)
        took = _until(
            lambda: (_switch_state(tmp_path, "b") or {}).get("programmed"),
            timeout=HUNG_TAKEOVER_BOUND,
        )
        state = _switch_state(tmp_path, "b")
        assert state["role"] == "primary" and state["writes"] == [0] and state["problems"] == []
        assert _holds_plan("embedded", address)
        print(f"takeover after SIGSTOP of the primary: {took:.3f} s (state file polled)")
        a.send_signal(signal.SIGCONT)
        _resumed_one_stands_by(tmp_path, "a", "b", writes_a)
        assert _holds_plan("embedded", address)
    finally:
        _stop_all([*controllers, switch])


# bmv2's P4Runtime server (PI) gives gRPC no channel arguments, so gRPC core's server defaults
# apply: a keepalive PING only after 2 hours without activity. A controller's daemon rewrites its
# state file every second (`written_at`), which stops when it hangs.
STALE_AFTER = 3.0


def test_on_bmv2_a_stopped_primary_is_replaced_only_by_a_higher_election_id(tmp_path):
    """bmv2 keeps a SIGSTOPped primary's stream, so the backup stays a backup (checked for
    5 s; the embedded target has replaced it by then). What replaces it: the stopped
    controller's state file goes stale, and the backup started again with a higher election
    id preempts (P4Runtime arbitration) and writes nothing; resumed, the stopped one is told
    it is a backup and writes nothing."""
    switch, address = start_portless_switch("bmv2")
    controllers = []
    try:
        writes_a = _primary_and_backup(tmp_path, address, "bmv2", controllers)
        a, b = controllers
        a.send_signal(signal.SIGSTOP)
        time.sleep(5.0)
        assert _switch_state(tmp_path, "b")["role"] == "backup"
        assert time.time() - _state(tmp_path, "a")["written_at"] > STALE_AFTER
        assert time.time() - _state(tmp_path, "b")["written_at"] < STALE_AFTER
        b.terminate()
        b.wait(timeout=10)
        restarted = time.monotonic()
        controllers.append(_controller(tmp_path, "b", address, 21, "bmv2"))
        _until(
            lambda: (
                _state(tmp_path, "b").get("controller", {}).get("pid") == controllers[-1].pid
                and _switch_state(tmp_path, "b")["programmed"]
            )
        )
        state = _switch_state(tmp_path, "b")
        assert state["role"] == "primary" and state["writes"] == [0] and state["problems"] == []
        assert _holds_plan("bmv2", address)
        print(
            f"bmv2: backup restarted with a higher election id is primary in "
            f"{time.monotonic() - restarted:.3f} s (including its start)"
        )
        a.send_signal(signal.SIGCONT)
        _resumed_one_stands_by(tmp_path, "a", "b", writes_a)
        assert _holds_plan("bmv2", address)
    finally:
        _stop_all([*controllers, switch])


def test_on_bmv2_a_backup_watching_the_primary_takes_over_from_a_hung_one(tmp_path):
    """`--watch-primary` with the primary's state file: B (election id 10) watches A (20). A
    is SIGSTOPped; bmv2 keeps A's stream, but A's file goes stale, and B, without a restart,
    advertises an id above A's: within the staleness (2 s here) and a few polls it is primary
    with 0 writes, and the switch holds the plan. Resumed, A is told it is a backup and
    writes nothing."""
    switch, address = start_portless_switch("bmv2")
    controllers = []
    try:
        controllers.append(_controller(tmp_path, "a", address, 20, "bmv2"))
        _until(lambda: (_switch_state(tmp_path, "a") or {}).get("programmed"))
        writes_a = _switch_state(tmp_path, "a")["writes"]
        controllers.append(
            _controller(
                tmp_path,
                "b",
                address,
                10,
                "bmv2",
                "--watch-primary",
                str(tmp_path / "a.json"),
                "--primary-stale",
                "2",
            )
        )
        _until(lambda: (_switch_state(tmp_path, "b") or {}).get("role") == "backup")
        time.sleep(3.0)  # a primary that keeps writing its file is never preempted
        assert _switch_state(tmp_path, "b")["role"] == "backup"
        assert _state(tmp_path, "b")["preemptions"] == []
        controllers[0].send_signal(signal.SIGSTOP)
        took = _until(
            lambda: (_switch_state(tmp_path, "b") or {}).get("programmed"),
            timeout=HUNG_TAKEOVER_BOUND,
        )
        state = _switch_state(tmp_path, "b")
        assert state["role"] == "primary" and state["writes"] == [0] and state["problems"] == []
        assert [p["switches"] for p in _state(tmp_path, "b")["preemptions"]] == [["S1"]]
        assert _holds_plan("bmv2", address)
        print(f"bmv2: takeover by the watching backup {took:.3f} s after SIGSTOP of the primary")
        controllers[0].send_signal(signal.SIGCONT)
        _resumed_one_stands_by(tmp_path, "a", "b", writes_a)
        assert _holds_plan("bmv2", address)
    finally:
        _stop_all([*controllers, switch])


def test_only_a_primary_that_says_it_runs_and_stopped_writing_counts_as_hung(tmp_path):
    from controller.service.daemon import primary_hung_for

    state = tmp_path / "a.json"
    assert primary_hung_for(state, 5.0) is None  # no file: no evidence
    for written_ago, running, hung in ((1.0, True, False), (8.0, True, True), (8.0, False, False)):
        state.write_text(
            json.dumps(
                {"written_at": time.time() - written_ago, "controller": {"running": running}}
            )
        )
        age = primary_hung_for(state, 5.0)
        assert (age is not None) == hung, (written_ago, running)
        if hung:
            assert 7.9 < age < 9.0
    state.write_text("{half a file")
    assert primary_hung_for(state, 5.0) is None
