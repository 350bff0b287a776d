"""Model sharding in the host agents (EINA Sec. III-C): each worker sends each task's PS its
shard of the gradient; each PS finishes, and checks, only its own shard."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dataplane.agents import BadShards, _ps_shard, _worker_shards, register
from dataplane.bmv2 import free_tcp_port
from dataplane.frame import (
    ACK,
    CONTROL,
    DATA,
    FRAME_LEN,
    OFF_ELEMS,
    OFF_UDP,
    RESULT,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
    kind_of,
)
from dataplane.gradients import EPOCH_SHIFT, frag_id, fragments, shard_ranges, synthetic_gradient
from dataplane.netns import VethNet
from dataplane.p4rt_client import Client
from dataplane.ports import drain
from dataplane.ps import ParameterServer
from dataplane.recovery import CONTROL_RESEND_GAP
from dataplane.targets import KINDS, missing, program_for, start_target
from dataplane.worker import Worker

ROOT = Path(__file__).resolve().parents[2]
ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))


@pytest.mark.parametrize(
    ("total", "shares", "expected"),
    [
        # 1024 x 0.7 = 716.8 and 1024 x 0.3 = 307.2: floors 716 + 307 leave one fragment, which
        # goes to the larger remainder (0.8)
        (1024, [0.7, 0.3], [(0, 717), (717, 1024)]),
        (10, [0.5559, 0.4441], [(0, 6), (6, 10)]),  # 5.559 / 4.441 -> 5 + 4, the .559 gets one
        (3, [1 / 3, 1 / 3, 1 / 3], [(0, 1), (1, 2), (2, 3)]),  # equal remainders: task order
        (5, [0.2, 0.0, 0.8], [(0, 1), (1, 1), (1, 5)]),  # a zero share holds no fragment
        (7, [1.0], [(0, 7)]),  # one PS: the whole gradient
    ],
)
def test_shard_ranges_are_contiguous_and_sized_by_the_shares(total, shares, expected):
    assert shard_ranges(total, shares) == expected


def test_a_ps_takes_only_its_shard_and_answers_with_the_fragments_place_in_the_model():
    ps_end, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    ps = ParameterServer(ps_end, ME, Task(1, 1), workers=1, fragments=2, result_flow_id=9, offset=5)
    values = np.arange(K, dtype=np.int32)
    for wire in (4, 7, 6):  # 4 and 7 lie outside [5, 7): another PS's fragments
        ps.handle(
            build_frame(
                ME, ME, InaHeader(1, 1, DATA, 1, 0, wire, 1), values.astype(">i4").tobytes()
            )
        )
    assert ps.finished == 1 and ps.done.tolist() == [False, True]
    result = observer.recv(4096)
    header = InaHeader.unpack(result)
    assert (header.flags, header.frag_id) == (RESULT, 6)
    np.testing.assert_array_equal(np.frombuffer(result, ">i4", K, OFF_ELEMS), values)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def _agent_args(kind: str, state: Path, *extra: str) -> argparse.Namespace:
    common = [
        "--iface",
        "x",
        "--ip",
        "10.0.0.1",
        "--workers",
        str(WORKERS),
        "--size-mb",
        str(SIZE_MB),
        "--job",
        str(JOB),
        "--state",
        str(state),
    ]
    if kind == "worker":
        return _parse("worker", *common, "--ps-ip", "10.0.0.4", "--index", "0", *extra)
    return _parse("ps", *common, "--result-flow-id", "101", *extra)


def test_a_worker_takes_its_shards_from_the_state_file(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state()))
    rows = fragments(synthetic_gradient(0, 0, FRAGMENTS * K))
    shards = _worker_shards(_agent_args("worker", state, "--name", "w1"), None, ME, rows)
    assert [(w.task.task, w.offset, len(w.rows), w.flow_id, w.ps.ip) for w in shards] == [
        (0, 0, 717, 2, bytes([10, 0, 0, 4])),
        (1, 717, 307, 12, bytes([10, 0, 0, 5])),
    ]
    np.testing.assert_array_equal(np.concatenate([w.rows for w in shards]), rows)
    assert [_ps_shard(_agent_args("ps", state, "--task", t), FRAGMENTS) for t in "01"] == [
        (0, 717),
        (717, 307),
    ]


def test_without_shares_a_worker_sends_its_whole_gradient_to_its_task(tmp_path):
    state = tmp_path / "state.json"
    unsharded = _state()
    for row in unsharded["workers"]:
        row["model_share"] = None
    state.write_text(json.dumps(unsharded))
    rows = fragments(synthetic_gradient(0, 0, FRAGMENTS * K))
    (worker,) = _worker_shards(
        _agent_args("worker", state, "--name", "w1", "--task", "1"), None, ME, rows
    )
    assert (worker.task.task, worker.offset, len(worker.rows)) == (1, 0, FRAGMENTS)
    assert _ps_shard(_agent_args("ps", state, "--task", "1"), FRAGMENTS) == (0, FRAGMENTS)


def test_a_worker_missing_from_a_shards_task_is_refused(tmp_path):
    state = tmp_path / "state.json"
    partial = _state()
    partial["workers"] = [r for r in partial["workers"] if (r["worker"], r["task_id"]) != ("w2", 1)]
    state.write_text(json.dumps(partial))
    with pytest.raises(BadShards, match="worker w2: job 1 shards its model over tasks"):
        _worker_shards(_agent_args("worker", state, "--name", "w2"), None, ME, np.zeros((4, K)))


def _two_shards(sock: socket.socket, timeout: float) -> tuple[Worker, Worker]:
    """Fragments 0-5 go to task 0's PS, 6-9 to task 1's (flows 1 and 11)."""
    rows = np.zeros((10, K), dtype=">i4")
    return (
        Worker(sock, ME, ME, Task(1, 0), 1, 7, rows[:6], timeout=timeout),
        Worker(sock, ME, ME, Task(1, 1), 11, 7, rows[6:], timeout=timeout, offset=6),
    )


def _sent(observer: socket.socket) -> list[InaHeader]:
    out = []
    while True:
        try:
            out.append(InaHeader.unpack(observer.recv(4096)))
        except BlockingIOError:
            return out


def test_a_control_resends_its_fragment_at_once_but_not_at_every_round_trip():
    """While the occupant stays, a resend per CONTROL would ping-pong at the round-trip time."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker, _ = _two_shards(sock, timeout=0.5)
    worker.outstanding[2] = time.monotonic() + 0.5
    control = build_frame(ME, ME, InaHeader(1, 0, CONTROL, 1, 7, frag_id(0, 2), 1), bytes(4 * K))
    now = time.monotonic()
    for _ in range(3):  # three CONTROLs within one gap
        worker.receive(CONTROL, 1, frag_id(0, 2), control, now)
    assert [(h.flags, h.frag_id) for h in _sent(observer)] == [(DATA, 2)]
    time.sleep(CONTROL_RESEND_GAP)
    worker.receive(CONTROL, 1, frag_id(0, 2), control, time.monotonic())
    assert [(h.flags, h.frag_id) for h in _sent(observer)] == [(DATA, 2)]
    assert worker.stats.resent_on_control == 2


def test_a_shards_partial_sum_blocking_another_shard_is_freed_a_timeout_later():
    """Shard 0's packet collided with shard 1's fragment 7, which this worker has sent: its
    partial sum may wait on what shard 0's tree blocks (two PSs' trees in opposite
    directions), so if it still blocks a timeout later, an ACK under task 1 frees it."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    shards = _two_shards(sock, timeout=0.1)
    owner = next(w for w in shards if w.owns(7))
    assert owner is shards[1]
    now = 100.0
    owner.outstanding[1] = now + 1  # fragment 7 is its row 1
    owner.unblock(frag_id(0, 7), now, other_shard=True)  # first named: it may just be slow
    owner.unblock(frag_id(0, 7), now, other_shard=True)  # within the timeout: nothing either
    assert _sent(observer) == []
    # the worker's retransmission timeout later (the initial 0.1 s, clamped)
    owner.unblock(frag_id(0, 7), now + owner.rto, other_shard=True)
    assert [(h.flags, h.task, h.flow_id, h.frag_id) for h in _sent(observer)] == [(ACK, 1, 11, 7)]
    assert owner.stats.freed_across_shards == 1


# *** real packets: 3 workers and 2 PSs on one switch

WORKERS, PS_PORTS, SHARES = 3, (4, 5), (0.7, 0.3)
FRAGMENTS = 1024  # the shares below cut it at whole rows
SIZE_MB = FRAGMENTS * K * 4 / 2**20
SEED, JOB = 7, 1
RANGES = [(0, 717), (717, 1024)]  # by hand, as in the first case above


def _flow(task: int, worker: int) -> int:
    return 10 * task + worker + 1


def _program(client: Client) -> None:
    """Task t: workers' flows 10t+1.. (ports 1..3) merged into flow 100+10t, sent to its PS on
    port PS_PORTS[t]; its results multicast back to the three workers."""
    workers = list(range(1, WORKERS + 1))
    entities = [client.clone_session(p, p) for p in [*workers, *PS_PORTS]]
    entities.append(
        client.table_entry(
            "job_slots", {"job": JOB, "generation": 0}, "set_job_slots", base=0, count=4096
        )
    )
    for task, ps_port in enumerate(PS_PORTS):
        out_flow = 100 + 10 * task
        entities += [
            client.table_entry(
                "ina_forward",
                {"job": JOB, "task": task, "flow_id": out_flow},
                "forward",
                port=ps_port,
            ),
            client.group(task + 1, workers),
            client.table_entry(
                "result_multicast", {"job": JOB, "task": task}, "set_result_group", group=task + 1
            ),
        ]
        for i in range(WORKERS):
            entities.append(
                client.table_entry(
                    "ina_aggregate",
                    {"job": JOB, "task": task, "pipe": 0, "flow_id": _flow(task, i)},
                    "aggregate",
                    tag=task + 1,
                    member=1 << i,
                    full=(1 << WORKERS) - 1,
                    out_flow=out_flow,
                    next_node=200 + task,
                    name_group=0,
                )
            )
    for port in [*workers, *PS_PORTS]:
        entities.append(
            client.table_entry(
                "ipv4_lpm", {"dst_addr": (0x0A000000 + port, 32)}, "forward", port=port
            )
        )
    client.write(*entities)


def _state() -> dict:
    """The controller's state file as `ina controller` writes it for a 2-task sharded job."""
    rows = [
        {
            "worker": f"w{i}",
            "job_id": JOB,
            "task_id": task,
            "flow_id": _flow(task, i),
            "next_node": 1,
            "ps": f"ps{task}",
            "ps_ip": f"10.0.0.{PS_PORTS[task]}",
            "rate_gbps": 1.0,
            "workers_in_task": WORKERS,
            "result_flow_id": 101 + 10 * task,
            "version": 1,
            "model_share": SHARES[task],
        }
        for task in range(len(PS_PORTS))
        for i in range(WORKERS)
    ]
    return {"version": 1, "workers": rows}


def _shared_options(state: Path) -> list[str]:
    """The agent options every worker and PS of the sharded job takes."""
    return [
        "--workers",
        str(WORKERS),
        "--size-mb",
        str(SIZE_MB),
        "--job",
        str(JOB),
        "--state",
        str(state),
        "--seed",
        str(SEED),
    ]


def _start_pss(net: VethNet, common: list[str]) -> list[subprocess.Popen]:
    """The job's two PSs in the namespace, each checking the sum of its shard."""
    run = ["ip", "netns", "exec", net.ns, sys.executable, "-m", "dataplane"]
    return [
        subprocess.Popen(
            [
                *run,
                "ps",
                "--iface",
                net.host_if[port],
                "--ip",
                f"10.0.0.{port}",
                "--task",
                str(task),
                "--result-flow-id",
                str(101 + 10 * task),
                "--verify",
                *common,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for task, port in enumerate(PS_PORTS)
    ]


def _received(sock: socket.socket) -> list[InaHeader]:
    """INA frames that reached a PS's interface."""
    frames: list[bytes] = []
    drain(
        sock,
        lambda f: (
            frames.append(f)
            if len(f) >= FRAME_LEN and f[OFF_UDP + 2 : OFF_UDP + 4] == (20033).to_bytes(2, "big")
            else None
        ),
        limit=10**6,
    )
    return [InaHeader.unpack(f) for f in frames]


@pytest.mark.root
@pytest.mark.parametrize("target", KINDS)
def test_two_ps_shards_sum_exactly_and_each_ps_gets_only_its_shard(target, tmp_path):
    reason = missing(target)
    if reason:
        pytest.skip(reason)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state()))
    program = program_for(target)
    with VethNet(WORKERS + len(PS_PORTS)) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target(target, net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            _program(client)
            sniffers = [net.host_socket(p) for p in PS_PORTS]
            common = _shared_options(state)
            pss = _start_pss(net, common)
            run = ["ip", "netns", "exec", net.ns, sys.executable, "-m", "dataplane"]
            workers = [
                subprocess.Popen(
                    [
                        *run,
                        "worker",
                        "--iface",
                        net.host_if[i + 1],
                        "--ip",
                        f"10.0.0.{i + 1}",
                        "--ps-ip",
                        "10.0.0.4",
                        "--index",
                        str(i),
                        "--name",
                        f"w{i}",
                        "--verify",
                        *common,
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(WORKERS)
            ]
            reports = [json.loads(p.communicate(timeout=300)[0].splitlines()[-1]) for p in workers]
            ps_reports = [json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for p in pss]
            seen = [_received(s) for s in sniffers]
            client.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    assert all(r["exact"] for r in reports), reports
    for r in reports:
        assert [(s["task"], s["first_fragment"], s["fragments"]) for s in r["shards"]] == [
            (0, 0, 717),
            (1, 717, 307),
        ]
    for task, (lo, hi) in enumerate(RANGES):
        assert ps_reports[task]["exact"], ps_reports[task]
        assert (ps_reports[task]["first_fragment"], ps_reports[task]["fragments"]) == (lo, hi - lo)
        data = [h for h in seen[task] if kind_of(h.flags) == DATA]
        indices = {h.frag_id & ((1 << EPOCH_SHIFT) - 1) for h in data}
        assert indices == set(range(lo, hi)), f"PS {task} got fragments outside its shard"
        assert {h.task for h in data} == {task}
        # one merged flow per fragment into each PS (the switch aggregates all three workers)
        assert {h.flow_id for h in data} == {100 + 10 * task}
        assert all(h.count == WORKERS for h in data)
