"""Per-job counters reported by the job's agents, over real HTTP to a daemon programming
embedded switch processes: the agent's own reporting thread (`dataplane.plan_api`, fed by a
worker's and a PS's real stats objects) posts them every second and at exit with the bearer
token; `GET /jobs/{id}` sums them over agents and runs (checked against sums made here),
`/metrics` exports them per job, and bad bodies, strangers and unknown jobs get one line."""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import time

import pytest
from conftest import running_api
from prometheus_client.parser import text_string_to_metric_families

from dataplane.agents import (
    _api_token,
    _worker_shards,
    configure,
    ps_counts,
    register,
    reporter,
    worker_counts,
)
from dataplane.frame import Endpoint, K, Task
from dataplane.gradients import fragments, synthetic_gradient
from dataplane.plan_api import CounterReporter
from dataplane.ps import ParameterServer

TOKEN = "counters-token-0123456789abcdef"
ME = Endpoint(b"\x02" * 6, bytes([10, 0, 0, 9]))
JOB = {"name": "counted", "workers": ["H02", "H20", "H21"], "ps": "H11"}


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("counters")
    (tmp / "token").write_text(TOKEN + "\n")
    with running_api(tmp, TOKEN) as running:
        running["url"] = f"http://{running['address']}"
        running["token_file"] = str(tmp / "token")
        yield running


def _call(address: str, method: str, path: str, body=None, *, token=TOKEN, raw=None):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers=headers)
    answer = conn.getresponse()
    text = answer.read()
    conn.close()
    try:
        return answer.status, json.loads(text) if text else None
    except ValueError:
        return answer.status, text.decode()


@pytest.fixture
def job(controller):
    status, job = _call(controller["address"], "POST", "/jobs", JOB)
    assert status == 201, job
    yield job
    _call(controller["address"], "DELETE", f"/jobs/{job['id']}")


def _agent(controller, role: str, job_id: int, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    common = ["--iface", "x", "--ip", "10.0.0.9", "--api-token-file", controller["token_file"]]
    args = parser.parse_args(
        [role, "--api", controller["url"], "--job", str(job_id), *common, *extra]
    )
    _api_token(args)
    return args


def _wait_for(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_agents_report_and_the_job_shows_their_sums(controller, job):
    address, job_id = controller["address"], job["id"]
    args = _agent(controller, "worker", job_id, "--name", "H20")
    rows = configure(args, "worker")
    (worker,) = _worker_shards(args, None, ME, fragments(synthetic_gradient(0, 1, 8 * K)), rows)
    stats = worker.stats
    stats.sent, stats.controls, stats.timed_out, stats.resent_on_timeout = 40, 3, 2, 2
    stats.detected_lost, stats.spurious, stats.resent_on_loss = 5, 1, 5
    stats.resent_on_control, stats.sent_to_unblock = 3, 1
    worker.done = 8
    first = reporter(args, "worker", "H20", lambda: worker_counts([worker]))
    assert first is not None

    def shown():
        answer = _call(address, "GET", f"/jobs/{job_id}")[1]
        return answer if answer["agent_counters"]["agents"] else None

    view = _wait_for(shown, 5)["agent_counters"]  # a periodic report, before any close()
    assert view["agents"]["worker H20 task 0"]["final"] is False
    stats.sent = 50  # more traffic, then the agent exits
    assert first.close() and first.error is None
    agent = _call(address, "GET", f"/jobs/{job_id}")[1]["agent_counters"]["agents"][
        "worker H20 task 0"
    ]
    assert agent["final"] is True and agent["runs"] == 1
    assert (agent["sent"], agent["aggregations"], agent["collisions"]) == (50, 8, 3)
    assert agent["losses"] == {"timed_out": 2, "detected": 5, "spurious": 1}
    assert agent["resends"] == {"control": 3, "timeout": 2, "loss": 5, "unblock": 1, "result": 0}

    # The next iteration is a new process: its counts add to the last run's.
    stats.sent, stats.controls = 7, 1
    again = reporter(args, "worker", "H20", lambda: worker_counts([worker]))
    assert again is not None and again.close()
    ps_args = _agent(controller, "ps", job_id)
    configure(ps_args, "ps")
    assert ps_args.ps_host == "H11"
    ps = ParameterServer(None, ME, Task(job_id, 0), 3, 8, ps_args.result_flow_id)
    ps.finished, ps.results_sent, ps.duplicates_ignored = 8, 11, 4
    ps_report = reporter(ps_args, "ps", ps_args.ps_host, lambda: ps_counts(ps))
    assert ps_report is not None and ps_report.close()

    counters = _call(address, "GET", f"/jobs/{job_id}")[1]["agent_counters"]
    assert set(counters["agents"]) == {"worker H20 task 0", "ps H11 task 0"}
    h20 = counters["agents"]["worker H20 task 0"]
    assert (h20["runs"], h20["sent"], h20["collisions"]) == (2, 57, 4)
    total = counters["total"]
    assert (total["sent"], total["aggregations"], total["duplicates"]) == (57 + 11, 8 + 8 + 8, 4)
    assert total["resends"]["result"] == 3 and total["losses"]["timed_out"] == 4
    listed = next(j for j in _call(address, "GET", "/jobs")[1] if j["id"] == job_id)
    assert listed["agent_counters"] == counters
    shown = subprocess.run(
        [sys.executable, "-m", "controller.cli", "job", "show", str(job_id), "--api", address],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        "2 agents reported: 24 aggregations, 4 collisions, losses 16 (timed out 4, "
        "detected 10, spurious 2), resends 25 (control 6, timeout 4, loss 10, unblock 2, "
        "result 3)"
    ) in shown.stdout

    families = {
        f.name: f for f in text_string_to_metric_families(_call(address, "GET", "/metrics")[1])
    }

    def sample(family: str, **labels) -> float:
        return next(
            s.value
            for s in families[family].samples
            if s.labels.get("job") == "counted" and labels.items() <= s.labels.items()
        )

    assert sample("ina_job_sent") == 68 and sample("ina_job_aggregations") == 24
    assert sample("ina_job_collisions") == 4 and sample("ina_job_duplicates") == 4
    assert sample("ina_job_losses", cause="detected") == 10
    assert sample("ina_job_resends", cause="result") == 3
    assert sample("ina_job_resends", cause="control") == 6


def test_a_reporter_whose_job_ended_stops_with_one_line(controller, capsys):
    address = controller["address"]
    status, job = _call(address, "POST", "/jobs", {**JOB, "name": "short"})
    assert status == 201, job
    body = {"role": "ps", "host": "H11", "run": "r1"}
    counting = CounterReporter(controller["url"], job["id"], lambda: body, token=TOKEN, every=0.2)
    _wait_for(lambda: counting.sent >= 1)
    assert _call(address, "DELETE", f"/jobs/{job['id']}")[0] == 200
    _wait_for(lambda: counting.error)
    assert f"no job {job['id']} runs" in counting.error and "HTTP 404" in counting.error
    assert not counting.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "counters no longer reported" in err


def test_bad_reports_get_a_4xx_with_one_line_each(controller, job):
    address, job_id = controller["address"], job["id"]
    path = f"/jobs/{job_id}/counters"
    good = {"role": "worker", "host": "H02", "run": "abc", "sent": 1}
    cases = [
        (_call(address, "POST", path, {**good, "colour": "red"}), 422, "colour: unknown field"),
        (_call(address, "POST", path, {**good, "sent": -1}), 422, "sent"),
        (_call(address, "POST", path, {**good, "sent": "1"}), 422, "sent"),
        (_call(address, "POST", path, {**good, "losses": {"eaten": 1}}), 422, "losses.eaten"),
        (_call(address, "POST", path, {**good, "role": "switch"}), 422, "role"),
        (_call(address, "POST", path, {k: v for k, v in good.items() if k != "run"}), 422, "run"),
        (_call(address, "POST", path, raw=b'{"role": '), 400, "not valid JSON"),
        (_call(address, "POST", path, {**good, "host": "H05"}), 422, "H05 is not a worker"),
        (_call(address, "POST", path, {**good, "role": "ps"}), 422, "H02 is not the PS"),
        (_call(address, "POST", path, {**good, "task": 3}), 422, "has no task 3"),
        (_call(address, "POST", path, good, token=None), 401, "bearer token"),
        (_call(address, "POST", path, good, token="wrong-token-0123456789"), 401, "bearer"),
        (_call(address, "POST", "/jobs/29/counters", good), 404, "no job 29"),
        (_call(address, "POST", "/jobs/abc/counters", good), 422, "job_id"),
    ]
    for (status, answer), expected, says in cases:
        assert status == expected, answer
        assert isinstance(answer["detail"], str) and "\n" not in answer["detail"], answer
        assert says in answer["detail"], answer
    view = _call(address, "GET", f"/jobs/{job_id}")[1]
    assert view["agent_counters"]["agents"] == {}  # nothing refused was counted
    assert _call(address, "POST", path, good) == (204, None)


def test_a_late_report_of_an_earlier_run_updates_that_run(controller, job):
    address, job_id = controller["address"], job["id"]
    path = f"/jobs/{job_id}/counters"

    def report(run: str, sent: int) -> None:
        body = {"role": "worker", "host": "H21", "run": run, "sent": sent}
        assert _call(address, "POST", path, body)[0] == 204

    report("a", 1)
    report("b", 10)
    report("a", 5)  # run a's final report arrives after run b started: a counts 5, not 1 + 5
    for k in range(20):  # more runs than the controller keeps apart: the oldest are summed
        report(f"r{k}", 100)
    agent = _call(address, "GET", f"/jobs/{job_id}")[1]["agent_counters"]["agents"][
        "worker H21 task 0"
    ]
    assert (agent["runs"], agent["sent"]) == (22, 5 + 10 + 20 * 100)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--api-token-file", "/nonexistent/token"], "--api-token-file /nonexistent/token: cannot"),
        (["--api-token-file", "t", "--workers", "2", "--result-flow-id", "3"], "goes with --api"),
    ],
)
def test_a_token_file_that_cannot_be_used_is_one_line(extra, message):
    api = ["--api", "http://127.0.0.1:1", "--job", "2"] if "--workers" not in extra else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "ps",
            *api,
            "--iface",
            "lo",
            "--ip",
            "127.0.0.1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
