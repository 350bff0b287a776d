"""Agents that take their configuration from the controller's API by job id or name
(`ina worker|ps --api URL --job ID`): started before the job is submitted they wait, then
get exactly the ids the controller answered the submission with (and wrote into its state
file); a job that never comes, or bad options, end in one line and exit 2."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import free_port, running_api

from dataplane.agents import BadConfig, _ps_shard, _worker_shards, configure, register
from dataplane.frame import Endpoint, K, ip_bytes
from dataplane.gradients import fragments, synthetic_gradient
from dataplane.plan_api import ApiError, ApiWatcher, wait_for_job

ME = Endpoint(b"\x02" * 6, bytes([10, 0, 0, 9]))
JOB = {"workers": ["H02", "H20", "H21"], "ps": "H11"}


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    with running_api(tmp_path_factory.mktemp("agents"), None) as running:
        running["url"] = f"http://{running['address']}"
        yield running


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def _agent(role: str, url: str, *extra: str) -> argparse.Namespace:
    return _parse(
        role, "--api", url, "--iface", "x", "--ip", "10.0.0.9", "--api-wait", "60", *extra
    )


def _submit(address: str, body: dict) -> dict:
    import http.client

    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request(
        "POST",
        "/jobs",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    answer = conn.getresponse()
    job = json.loads(answer.read())
    assert answer.status == 201, job
    return job


def _delete(address: str, job_id: int) -> None:
    import http.client

    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("DELETE", f"/jobs/{job_id}")
    assert conn.getresponse().status == 200


def _started_before(controller, args: argparse.Namespace, role: str, body: dict):
    """`configure(args)` started before the job is submitted: it is still waiting when the
    POST goes out; the POST's answer and what `configure` returned."""
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(configure, args, role)
        time.sleep(1.5)
        assert not waiting.done(), waiting.result()  # waits, does not fail
        job = _submit(controller["address"], body)
        return job, waiting.result(timeout=30)


def test_a_worker_started_before_its_job_waits_then_takes_the_ids_it_was_given(controller):
    url, session = controller["url"], controller["session"]
    coming = session.jobs.last_id % 31 + 1  # ids are given round robin
    args = _agent("worker", url, "--job", str(coming), "--name", "H20")
    job, rows = _started_before(controller, args, "worker", {"name": "early", **JOB})
    assert job["id"] == coming
    agents = job["tasks"][0]["agents"]
    mine = next(a for a in agents if a["worker"] == "H20")
    assert rows == agents
    assert (args.ps_ip, args.flow_id, args.next_node, args.workers, args.task) == (
        mine["ps_ip"],
        mine["flow_id"],
        mine["next_node"],
        3,
        mine["task_id"],
    )
    assert args.index == [a["worker"] for a in agents].index("H20")
    state = json.loads(Path(controller["state"]).read_text())
    assert [r for r in state["workers"] if r["job_id"] == coming] == rows  # as on the file

    ps = _agent("ps", url, "--job", str(coming))
    assert configure(ps, "ps") == rows
    assert (ps.result_flow_id, ps.workers) == (mine["result_flow_id"], 3)
    assert _ps_shard(ps, 100, rows) == (0, 100)

    gradient = fragments(synthetic_gradient(0, args.index, 4 * K))
    (worker,) = _worker_shards(args, None, ME, gradient, rows)
    assert (worker.flow_id, worker.ps.ip, worker.task.job) == (
        mine["flow_id"],
        ip_bytes(mine["ps_ip"]),
        coming,
    )
    watcher = worker.plan
    assert isinstance(watcher, ApiWatcher)
    deadline = time.monotonic() + 10
    while (row := watcher.poll(time.monotonic())) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert row == mine and watcher.version == state["version"]
    assert watcher.poll(time.monotonic()) is None  # no newer plan
    _delete(controller["address"], coming)


def test_agents_can_follow_a_job_by_the_name_it_will_be_submitted_with(controller):
    url = controller["url"]
    args = _agent("worker", url, "--job-name", "named", "--name", "H02")
    job, rows = _started_before(controller, args, "worker", {"name": "named", **JOB})
    assert args.job == job["id"] and rows == job["tasks"][0]["agents"]
    assert args.index == 0  # H02 is the first worker
    _delete(controller["address"], job["id"])


def test_a_job_that_never_comes_ends_the_wait_with_one_line(controller):
    url = controller["url"]
    ticks = iter(range(100))
    with pytest.raises(ApiError, match=r"job 29 is not installed .* after 2 s"):
        wait_for_job(url, 29, wait=2, clock=lambda: next(ticks), sleep=lambda _: None)
    with pytest.raises(BadConfig, match=r"job .* has no worker H99"):
        args = _agent("worker", url, "--job", "1", "--name", "H99")
        configure(args, "worker")
    nobody = f"http://127.0.0.1:{free_port()}"  # no controller there (yet): it waits too
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "worker",
            "--api",
            nobody,
            "--job",
            "3",
            "--name",
            "H20",
            "--iface",
            "lo",
            "--ip",
            "127.0.0.1",
            "--api-wait",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "job 3 is not installed" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["worker", "--iface", "lo", "--ip", "127.0.0.1"], "--ps-ip, --index, --workers needed"),
        (["ps", "--iface", "lo", "--ip", "127.0.0.1", "--workers", "2"], "--result-flow-id needed"),
        (
            [
                "worker",
                "--api",
                "http://127.0.0.1:1",
                "--iface",
                "lo",
                "--ip",
                "127.0.0.1",
                "--name",
                "H20",
            ],
            "needs --job ID",
        ),
        (
            [
                "worker",
                "--api",
                "http://127.0.0.1:1",
                "--job",
                "2",
                "--iface",
                "lo",
                "--ip",
                "127.0.0.1",
            ],
            "needs --name",
        ),
        (
            [
                "ps",
                "--api",
                "http://127.0.0.1:1",
                "--job",
                "2",
                "--state",
                "s.json",
                "--iface",
                "lo",
                "--ip",
                "127.0.0.1",
            ],
            "two sources of one plan",
        ),
        (
            ["ps", "--api", "127.0.0.1:1", "--job", "2", "--iface", "lo", "--ip", "127.0.0.1"],
            "expected http://HOST:PORT",
        ),
    ],
)
def test_options_that_leave_an_agent_without_its_ids_are_one_line(argv, message):
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.root
def test_a_training_session_opens_from_the_api_by_job_name(controller):
    """dataplane.allreduce: a Session takes its ids from the API as the agents do, and
    follows the plan there (its watcher starts at the version it was given)."""
    from dataplane.allreduce import Session

    job = _submit(controller["address"], {"name": "training", **JOB})
    agents = job["tasks"][0]["agents"]
    mine = next(a for a in agents if a["worker"] == "H21")
    with Session.open(
        iface="lo", ip="10.0.0.9", name="H21", api=controller["url"], job_name="training"
    ) as session:
        (route,) = session.routes
        assert (route.task.job, route.row, route.contributor) == (job["id"], mine, 2)
        assert route.ps.ip == ip_bytes(mine["ps_ip"]) and session.workers == 3
        assert session.peers == ["H02", "H20"]
        time.sleep(1.5)  # the watcher has read the rows again (every 0.5 s): no newer version
        assert route.plan is not None and route.plan.poll(time.monotonic()) is None
    _delete(controller["address"], job["id"])
