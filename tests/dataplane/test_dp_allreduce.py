"""The worker library (dataplane/allreduce.py) and the session PS (dataplane/session_ps.py):
float arrays summed over real packets through the embedded switch, step after step."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dataplane.allreduce import PeerMissing, Session, SessionError, _Route
from dataplane.bmv2 import free_tcp_port
from dataplane.demo import JOB, RESULT_FLOW, SWITCH_NODE, TASK, program_aggregation
from dataplane.frame import (
    DATA,
    OFF_ELEMS,
    PROBE,
    SLOTS_PER_PIPE,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
)
from dataplane.gradients import EPOCHS, frag_id, split_frag_id
from dataplane.netns import VethNet
from dataplane.p4rt_client import Client
from dataplane.quantize import reduce_locally
from dataplane.session_ps import KEEP_EPOCHS, SessionPS
from dataplane.state import PlanWatcher
from dataplane.targets import missing, program_for, start_target

ROOT = Path(__file__).resolve().parents[2]
ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))


def _data(epoch: int, wire: int, flow: int, values: np.ndarray, flags: int = DATA) -> bytes:
    header = InaHeader(JOB, TASK, flags, flow, 0, frag_id(epoch, wire), 1)
    return build_frame(ME, ME, header, values.astype(">i4").tobytes())


def _results(sock: socket.socket) -> list[tuple[int, int, list[int]]]:
    out = []
    while True:
        try:
            frame = sock.recv(4096)
        except BlockingIOError:
            return out
        epoch, wire = split_frag_id(InaHeader.unpack(frame).frag_id)
        out.append((epoch, wire, np.frombuffer(frame, ">i4", 2, OFF_ELEMS).tolist()))


def test_the_session_ps_serves_step_after_step_of_any_size_and_answers_the_last_ones():
    ps_end, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    ps = SessionPS(ps_end, ME, Task(JOB, TASK), workers=2, result_flow_id=RESULT_FLOW)
    ones = np.ones(K, np.int32)
    for epoch, fragments in ((0, 3), (1, 40)):  # sizes it is never told
        for wire in range(fragments):
            ps.handle(_data(epoch, wire, 1, ones))
            ps.handle(_data(epoch, wire, 1, ones))  # a duplicate: counted once
            assert _results(observer) == []
            ps.handle(_data(epoch, wire, 2, 2 * ones))
            assert _results(observer) == [(epoch, wire, [3, 3])]
    ps.handle(_data(0, 2, 1, ones, PROBE))  # a worker lost step 0's last result
    assert _results(observer) == [(0, 2, [3, 3])]
    assert (ps.steps, ps.finished, ps.miscounted) == (2, 43, 0)
    for epoch in range(2, 2 + KEEP_EPOCHS):
        ps.handle(_data(epoch, 0, 1, ones))
    ps.handle(_data(0, 2, 1, ones, PROBE))  # long gone: nothing to answer
    assert _results(observer) == []


def _offline_session(workers: int = 2) -> Session:
    sock, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    route = _Route(Task(JOB, TASK), ME, {"flow_id": 1, "next_node": 0}, 0)
    return Session(sock, ME, [route], workers)


def test_allreduce_refuses_nan_bad_dtypes_and_unknown_ops_before_sending():
    session = _offline_session()
    grad = np.zeros((2, 3), np.float32)
    grad[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"element \(1, 1\) is nan"):
        session.allreduce(grad)
    with pytest.raises(TypeError, match="float32 NumPy array, not float64"):
        session.allreduce(np.zeros(3))
    with pytest.raises(SessionError, match="op must be one of sum, mean, not 'max'"):
        session.allreduce(np.zeros(3, np.float32), op="max")


def test_each_round_starts_on_the_newest_plan_version(tmp_path):
    """A re-plan seen during one round (the worker polls the state file) gives the next
    round its new ids."""
    state = tmp_path / "state.json"
    row = {"worker": "w0", "job_id": JOB, "task_id": TASK, "flow_id": 1, "next_node": 1}
    row |= {"rate_gbps": 1.0, "segments": []}
    state.write_text(json.dumps({"version": 1, "workers": [row]}))
    watcher = PlanWatcher(state, lambda r: r["worker"] == "w0", version=1)
    session = _offline_session()
    session.routes[0] = _Route(Task(JOB, TASK), ME, dict(row), 0, watcher)
    rows = np.zeros((3, K), ">i4")
    (first,) = session._workers(rows, 0)
    first.start(time.monotonic())
    assert first.flow_id == 1
    state.write_text(json.dumps({"version": 2, "workers": [row | {"flow_id": 7}]}))
    first.start(time.monotonic() + 1)  # its next poll, 1 s on
    assert first.flow_id == 7
    (second,) = session._workers(rows, 3)
    assert (second.flow_id, second.offset, second.epoch) == (7, 3, 0)


def test_open_without_a_plan_names_the_ids_it_needs():
    with pytest.raises(SessionError, match="index, workers needed"):
        Session.open(iface="lo", ip="10.0.0.1", ps_ip="10.0.0.4")


WORKERS = 3
SHAPES = [(7, 13), (1,), (5, 3, 11), (300,)]


def _steps(index: int) -> list[np.ndarray]:
    """Worker `index`'s gradients: odd shapes, mixed magnitudes and signs, a zero block."""
    rng = np.random.default_rng([11, index])
    out = []
    for step, shape in enumerate(SHAPES):
        grad = rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)
        if step == 2:
            grad.reshape(-1)[:40] = 0.0
        out.append(grad.astype(np.float32))
    return out


@pytest.fixture
def switch_net():
    """WORKERS workers and a PS (port WORKERS + 1) on one embedded switch that sums flows
    1..WORKERS into the PS, as `ina dataplane-demo` programs it."""
    reason = missing("embedded")
    if reason:
        pytest.skip(reason)
    ps_port = WORKERS + 1
    program = program_for("embedded")
    with VethNet(ps_port) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target("embedded", net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            senders = list(range(1, WORKERS + 1))
            program_aggregation(client, senders, ps_port, slots=SLOTS_PER_PIPE)
            client.close()
            yield net
        finally:
            switch.terminate()
            switch.wait(timeout=10)


@contextlib.contextmanager
def _session_ps(net: VethNet, port: int = WORKERS + 1, *options: str):
    """`ina ps --session` on `port`, released (--wait-go) and stopped (a second line);
    yields a dict that receives its final report."""
    command = [
        *("ip", "netns", "exec", net.ns, sys.executable, "-m", "dataplane", "ps", "--session"),
        *("--iface", net.host_if[port], "--ip", f"10.0.0.{port}", "--workers", str(WORKERS)),
        *(options or ("--result-flow-id", str(RESULT_FLOW), "--task", str(TASK))),
        *("--job", str(JOB), "--wait-go"),
    ]
    ps = subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert ps.stdin is not None and ps.stdout is not None
    assert json.loads(ps.stdout.readline()) == {"ready": True}
    ps.stdin.write("go\n")
    ps.stdin.flush()
    report: dict = {}
    try:
        yield report
    finally:
        report.update(json.loads(ps.communicate("stop\n", timeout=20)[0]))


def _open(net: VethNet, index: int, timeout: float = 30.0) -> Session:
    return Session.open(
        iface=net.host_if[index + 1],
        ip=f"10.0.0.{index + 1}",
        netns=net.ns,
        ps_ip=f"10.0.0.{WORKERS + 1}",
        index=index,
        workers=WORKERS,
        job=JOB,
        task=TASK,
        next_node=SWITCH_NODE,
        timeout=timeout,
    )


@pytest.mark.root
def test_three_workers_allreduce_float_arrays_step_after_step_over_the_switch(switch_net):
    """4 steps, across the wrap of the epoch field; every result is exactly the sum of the
    quantized values and within the stated bound of the float64 sum."""
    first = EPOCHS - 2
    results: dict[int, list] = {}
    rounds: dict[int, list] = {i: [] for i in range(WORKERS)}  # what `on_round` reported
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            with _open(switch_net, index) as session:
                session.step = first
                session.on_round = lambda name, sent, summed: rounds[index].append(
                    (name, np.array(sent, dtype=np.int64), np.array(summed, dtype=np.int64))
                )
                out = []
                for grad in _steps(index):
                    op = "mean" if len(out) == 1 else "sum"
                    out.append((session.allreduce(grad, op=op), session.last_bound))
                results[index] = out
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    with _session_ps(switch_net) as ps:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    assert ps["steps"] == len(SHAPES) and ps["miscounted"] == 0, ps
    inputs = [_steps(i) for i in range(WORKERS)]
    for step, shape in enumerate(SHAPES):
        flat = [inputs[i][step].reshape(-1) for i in range(WORKERS)]
        quantized, _ = reduce_locally(flat)
        exact = sum(a.astype(np.float64) for a in flat)
        divide = WORKERS if step == 1 else 1
        for index in range(WORKERS):
            got, bound = results[index][step]
            assert got.shape == shape and got.dtype == np.float32
            np.testing.assert_array_equal(got.reshape(-1), (quantized / divide).astype(np.float32))
            assert np.all(np.abs(got.reshape(-1) - exact / divide) <= bound.reshape(-1))
    # Every round, as `on_round` saw it: three per step, each sum every worker's values'.
    assert [[name for name, _, _ in rounds[i]] for i in range(WORKERS)] == [
        ["exponent", "bound", "payload"] * len(SHAPES)
    ] * WORKERS
    for r in range(3 * len(SHAPES)):
        total = sum(rounds[i][r][1] for i in range(WORKERS))
        for i in range(WORKERS):
            np.testing.assert_array_equal(rounds[i][r][2], total)


@pytest.mark.root
def test_a_worker_that_never_comes_is_reported_to_the_others(switch_net):
    raised: dict[int, BaseException] = {}
    took: dict[int, float] = {}

    def worker(index: int) -> None:
        with _open(switch_net, index, timeout=1.5) as session:
            started = time.monotonic()
            try:
                session.allreduce(np.ones(100, np.float32))
            except PeerMissing as exc:
                raised[index] = exc
            took[index] = time.monotonic() - started

    with _session_ps(switch_net):
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS - 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert sorted(raised) == [0, 1]
    assert "worker 2" in str(raised[0]) and "exponent round" in str(raised[0])
    assert all(1.5 <= s < 10 for s in took.values()), took


@pytest.mark.root
def test_a_sharded_job_opened_from_the_state_file_sends_each_ps_its_shard(tmp_path):
    """The 2-task sharded job of test_dp_shards (shares 0.7 / 0.3, one switch): sessions
    opened from the controller's state file by name, two `ina ps --session --state`."""
    from test_dp_shards import PS_PORTS, _program, _state

    reason = missing("embedded")
    if reason:
        pytest.skip(reason)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state()))
    program = program_for("embedded")
    grads = [[np.full((40, 33), (i + 1) * 0.5**s, np.float32) for s in range(2)] for i in range(3)]
    results: dict[int, list[np.ndarray]] = {}
    with VethNet(WORKERS + len(PS_PORTS)) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target("embedded", net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            _program(client)
            client.close()

            def worker(index: int) -> None:
                with Session.open(
                    iface=net.host_if[index + 1],
                    ip=f"10.0.0.{index + 1}",
                    netns=net.ns,
                    name=f"w{index}",
                    state=state,
                    rate_scale=100.0,
                ) as session:
                    assert [r.task.task for r in session.routes] == [0, 1]
                    results[index] = [session.allreduce(g) for g in grads[index]]

            with contextlib.ExitStack() as stack:
                reports = [
                    stack.enter_context(
                        _session_ps(
                            net,
                            port,
                            *("--state", str(state), "--task", str(task)),
                            *("--result-flow-id", str(101 + 10 * task)),
                        )
                    )
                    for task, port in enumerate(PS_PORTS)
                ]
                threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=120)
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    for index in range(WORKERS):
        for step in range(2):
            np.testing.assert_array_equal(results[index][step], np.full((40, 33), 6 * 0.5**step))
    # each PS finished only its share of each round's fragments
    assert [r["steps"] for r in reports] == [2, 2]
    assert reports[0]["fragments_finished"] > 2 * reports[1]["fragments_finished"] > 0


@pytest.mark.root
def test_the_allreduce_demo_runs_worker_processes_and_writes_json_and_png(tmp_path):
    reason = missing("embedded")
    if reason:
        pytest.skip(reason)
    command = [sys.executable, "-m", "controller.cli", "allreduce-demo", "--workers", "2"]
    command += ["--steps", "2", "--elements", "1000", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "allreduce.json").read_text())
    assert report["all_within_bound"] and len(report["steps"]) == 2
    assert report["ps"]["steps"] == 2 and report["ps"]["miscounted"] == 0
    assert (tmp_path / "allreduce.png").stat().st_size > 0


def test_ina_ps_session_refuses_verify_in_one_line():
    command = [sys.executable, "-m", "dataplane", "ps", "--session", "--verify"]
    command += ["--iface", "lo", "--ip", "10.0.0.9", "--workers", "2", "--result-flow-id", "9"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: ina ps --session: --verify checks one synthetic iteration; drop it"
    ]


@contextlib.contextmanager
def _lossy(interfaces: list[str], percent: int):
    """`percent` % of the frames leaving each interface dropped (an nftables egress chain:
    this kernel has no netem), on this test's own veths (random names: a table left by a
    killed run touches no other test's interfaces)."""
    table = f"ina_allreduce_test_{os.getpid()}"
    nft = ["nft"]
    subprocess.run([*nft, "add", "table", "netdev", table], check=True)
    try:
        for i, dev in enumerate(interfaces):
            hook = f"{{ type filter hook egress device {dev} priority 0; }}"
            subprocess.run([*nft, "add", "chain", "netdev", table, f"e{i}", hook], check=True)
            rule = ["numgen", "random", "mod", "100", "<", str(percent), "counter", "drop"]
            subprocess.run([*nft, "add", "rule", "netdev", table, f"e{i}", *rule], check=True)
        seen: dict[str, int] = {}
        yield seen
        listing = subprocess.run(
            [*nft, "-j", "list", "table", "netdev", table], capture_output=True, text=True
        )
        seen["dropped"] = sum(
            part["counter"]["packets"]
            for item in json.loads(listing.stdout)["nftables"]
            if "rule" in item
            for part in item["rule"]["expr"]
            if "counter" in part
        )
    finally:
        subprocess.run([*nft, "delete", "table", "netdev", table], check=False)


@pytest.mark.root
def test_sums_stay_exact_when_the_switch_drops_5_percent_of_what_it_sends(switch_net):
    """Lost results, CONTROLs and merged DATA on every port: the rounds recover (each a
    Worker transfer) and every step's result is still the exact quantized sum."""
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed")
    shape, steps = (37, 29 * K // 32), 3  # 34 fragments a step whatever K is: ten or more drops
    grads = [
        [
            np.random.default_rng([5, i, s]).standard_normal(shape).astype(np.float32)
            for s in range(steps)
        ]
        for i in range(WORKERS)
    ]
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            with _open(switch_net, index, timeout=60) as session:
                results[index] = [session.allreduce(g) for g in grads[index]]
        except BaseException as exc:  # reported below
            errors.append(exc)

    with _lossy(list(switch_net.switch_if.values()), 5) as loss, _session_ps(switch_net) as ps:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert not errors, errors
    assert loss["dropped"] > 10 and ps["miscounted"] == 0, (loss, ps)
    for step in range(steps):
        quantized, _ = reduce_locally([grads[i][step].reshape(-1) for i in range(WORKERS)])
        for index in range(WORKERS):
            np.testing.assert_array_equal(
                results[index][step].reshape(-1), quantized.astype(np.float32)
            )
