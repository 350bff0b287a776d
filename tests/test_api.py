"""The northbound API over real HTTP, on a daemon programming real embedded switches: jobs
submitted and ended at run time, their entries read back from the switches by a client of our
own (not the controller's driver), refusals that change nothing, concurrent submissions, the
errors a client gets, the metrics and `ina job`."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import pytest
import yaml
from conftest import API_SWITCHES, HOSTS, cluster_doc, free_port, running_api
from prometheus_client.parser import text_string_to_metric_families

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.model.plan import AggregationPoint, Plan, TaskPlan
from controller.service import api
from dataplane.p4rt_client import Client
from dataplane.schema import load_p4info

TOKEN = "test-token-0123456789abcdef"
SWITCHES = API_SWITCHES


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    """A daemon with the API (token required) programming embedded switch processes."""
    with running_api(tmp_path_factory.mktemp("api"), TOKEN) as running:
        _wait_for(lambda: _call(running["address"], "GET", "/healthz")[0] == 200)
        yield running


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _call(
    address: str,
    method: str,
    path: str,
    body=None,
    *,
    token: str | None = TOKEN,
    raw: bytes | None = None,
    headers: dict | None = None,
) -> tuple[int, object]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=data, headers=sent)
    answer = conn.getresponse()
    text = answer.read()
    conn.close()
    try:
        return answer.status, json.loads(text)
    except ValueError:
        return answer.status, text.decode()


def _held(
    addresses: dict[str, str], p4info=None, device_ids: dict[str, int] | None = None
) -> dict[str, dict[int, set[bytes]]]:
    """Per switch, its table entries and multicast groups read back by our own P4Runtime
    client (a backup: election id 1), grouped by the job they name (0: none, groups by
    their id's job block). Default: the checked-in P4Info, device id 1."""
    p4info = p4info or load_p4info()
    tables = {t.preamble.id: t for t in p4info.tables}
    out = {}
    for name, address in addresses.items():
        client = Client(address, (device_ids or {}).get(name, 1), 1, p4info)
        try:
            query = client.read(_wildcard("table"), _wildcard("group"))
        finally:
            client.close()
        by_job: dict[int, set[bytes]] = {}
        for entity in query:
            if entity.WhichOneof("entity") == "table_entry":
                entry = entity.table_entry
                entry.ClearField("counter_data")
                fields = {f.id: f.name for f in tables[entry.table_id].match_fields}
                job = next(
                    (
                        int.from_bytes(m.exact.value, "big")
                        for m in entry.match
                        if fields[m.field_id] == "job"
                    ),
                    0,
                )
            else:
                group = entity.packet_replication_engine_entry.multicast_group_entry
                job = (group.multicast_group_id - 1) % 4096 // 128
            by_job.setdefault(job, set()).add(entity.SerializeToString(deterministic=True))
        out[name] = by_job
    return out


def _wildcard(kind: str):
    from finsy.proto import p4r

    entity = p4r.Entity()
    if kind == "table":
        entity.table_entry.SetInParent()
    else:
        entity.packet_replication_engine_entry.multicast_group_entry.SetInParent()
    return entity


def _of_job(held: dict, job: int) -> dict[str, set[bytes]]:
    return {name: by_job.get(job, set()) for name, by_job in held.items()}


def _union_judged(doc: dict, views: list[dict]):
    """The evaluator's verdict on every job's plan as the API reports it, as one plan on the
    topology (without its jobs: a host may be a PS in one job and a worker in another, which
    a topology file cannot say)."""
    network = build_network({**doc, "jobs": []})
    tasks = [
        TaskPlan(
            v["name"],
            t["task"],
            t["ps"],
            t["rate_gbps"],
            t["paths"],
            [
                AggregationPoint(
                    a["switch"], a["pipeline"], a["fan_in"], a["next_hop"], None, a["share"]
                )
                for a in t["aggregation"]
            ],
        )
        for v in views
        for t in v["tasks"]
    ]
    return evaluate(network, Plan("api", "heuristic", 0.0, None, 0.0, None, tasks))


def test_job_b_runs_beside_a_and_ends_leaving_a_as_it_was(controller):
    address, switches = controller["address"], controller["switches"]
    before = _held(switches)
    status, b = _call(
        address,
        "POST",
        "/jobs",
        {"name": "B", "workers": ["H02", "H20", "H21"], "ps": "H11", "gradient_mb": 100},
    )
    assert status == 201, b
    after = _held(switches)
    assert _of_job(after, 1) == _of_job(before, 1)  # A's entries untouched
    assert {n: len(e) for n, e in _of_job(after, b["id"]).items()} == {
        n: b["entries"].get(n, 0) + _groups(after[n], b["id"]) for n in switches
    }
    assert any(b["entries"].values())
    assert b["communication_seconds"] == pytest.approx(100 * 8 / 1000 / b["tasks"][0]["rate_gbps"])
    agents = {a["worker"] for a in b["tasks"][0]["agents"]}
    assert agents == {"H02", "H20", "H21"} and b["slot_region"]["count"] == 128
    status, views = _call(address, "GET", "/jobs")
    assert [v["name"] for v in views] == ["A", "B"]
    assert _union_judged(controller["doc"], views).consistent
    assert _call(address, "GET", f"/jobs/{b['id']}") == (200, b)
    state = json.loads(controller["state"].read_text())
    assert {w["job_id"] for w in state["workers"]} == {1, b["id"]}
    status, removal = _call(address, "DELETE", f"/jobs/{b['id']}")
    assert status == 200 and removal["left_on_switches"] == dict.fromkeys(switches, 0)
    assert removal["not_read"] == []
    gone = _held(switches)
    assert not any(_of_job(gone, b["id"]).values())
    assert gone == before  # A's entries and the shared ones exactly as they were
    assert _call(address, "GET", f"/jobs/{b['id']}")[0] == 404


def _groups(by_job: dict[int, set[bytes]], job: int) -> int:
    from finsy.proto import p4r

    count = 0
    for raw in by_job.get(job, ()):
        entity = p4r.Entity.FromString(raw)
        count += entity.WhichOneof("entity") == "packet_replication_engine_entry"
    return count


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"workers": ["H03"], "ps": "H10"}, "capacity"),  # A's PS link is full
        ({"workers": ["H03"], "ps": "H12", "min_rate_gbps": 100}, "capacity"),
        ({"workers": ["H03"], "ps": "H12", "slots": 1024}, "no slot memory left"),
        ({"workers": ["H03"], "ps": "nowhere"}, "unknown host"),
    ],
)
def test_a_job_that_does_not_fit_is_refused_with_the_reason_and_nothing_changes(
    controller, body, reason
):
    address = controller["address"]
    before, jobs = _held(controller["switches"]), _call(address, "GET", "/jobs")
    version = json.loads(controller["state"].read_text())["version"]
    status, answer = _call(address, "POST", "/jobs", body)
    assert status in (409, 422) and answer["reason"] == reason, answer
    assert "\n" not in answer["detail"]
    assert _held(controller["switches"]) == before
    assert _call(address, "GET", "/jobs") == jobs
    assert json.loads(controller["state"].read_text())["version"] == version


def test_twenty_concurrent_submissions_are_each_admitted_or_refused_consistently(controller):
    address, switches = controller["address"], controller["switches"]
    before = _held(switches)
    bodies = []
    for i in range(20):
        ps = HOSTS[(5 * i + 3) % len(HOSTS)]
        workers = [h for h in (HOSTS[(7 * i + k) % len(HOSTS)] for k in (1, 2, 9)) if h != ps]
        bodies.append({"name": f"c{i}", "workers": workers, "ps": ps, "slots": 96})
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda body: _call(address, "POST", "/jobs", body), bodies))
    admitted = [a for s, a in answers if s == 201]
    refused = [a for s, a in answers if s != 201]
    assert all(s in (201, 409) for s, _ in answers), answers
    assert {a["reason"] for a in refused} <= {"capacity", "no slot memory left", "job ids"}
    assert admitted and refused  # this load is meant to fill the slot memory
    views = _call(address, "GET", "/jobs")[1]
    assert sorted(v["name"] for v in views) == sorted(["A", *(a["name"] for a in admitted)])
    regions = sorted(
        (v["slot_region"]["base"], v["slot_region"]["base"] + v["slot_region"]["count"])
        for v in views
    )
    assert all(a[1] <= b[0] for a, b in pairwise(regions))
    assert len({v["id"] for v in views}) == len(views)
    judged = _union_judged(controller["doc"], views)
    assert judged.consistent, judged.problems
    held = _held(switches)
    for view in views:  # every switch holds exactly what the controller says for each job
        assert {
            n: len(e) - _groups(held[n], view["id"]) for n, e in _of_job(held, view["id"]).items()
        } == {n: view["entries"].get(n, 0) for n in switches}
    for job in admitted:
        assert _call(address, "DELETE", f"/jobs/{job['id']}")[0] == 200
    assert _held(switches) == before


def test_bad_requests_get_a_4xx_with_one_line_each(controller):
    address = controller["address"]
    job = {"workers": ["H03"], "ps": "H12"}
    cases = [
        (_call(address, "POST", "/jobs", raw=b'{"workers": ['), 400),
        (_call(address, "POST", "/jobs", {**job, "colour": "red"}), 422),
        (_call(address, "POST", "/jobs", {**job, "slots": "many"}), 422),
        (_call(address, "POST", "/jobs", raw=b"x" * (api.MAX_BODY + 1)), 413),
        (_call(address, "POST", "/jobs", job, token=None), 401),
        (_call(address, "POST", "/jobs", job, token="wrong-token-0123456789"), 401),
        (_call(address, "DELETE", "/jobs/1", token=None), 401),
        (_call(address, "DELETE", "/jobs/1"), 409),  # the topology file's job
        (_call(address, "GET", "/jobs/29"), 404),
        (_call(address, "DELETE", "/jobs/29"), 404),
        (_call(address, "GET", "/jobs/abc"), 422),
    ]
    for (status, answer), expected in cases:
        assert status == expected, answer
        assert isinstance(answer["detail"], str) and "\n" not in answer["detail"], answer
    assert "colour: unknown field" in cases[1][0][1]["detail"]
    chunked = http.client.HTTPConnection(*address.rsplit(":", 1), timeout=10)
    chunked.request(
        "POST",
        "/jobs",
        body=iter([b"{}"]),
        encode_chunked=True,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert chunked.getresponse().status == 411
    assert _call(address, "GET", "/jobs")[1][0]["name"] == "A"


def test_metrics_topology_health_and_the_openapi_schema(controller):
    address = controller["address"]
    status, text = _call(address, "GET", "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    programmed = {s.labels["switch"]: s.value for s in families["ina_switch_programmed"].samples}
    assert programmed == dict.fromkeys(SWITCHES, 1.0)
    assert {s.labels["switch"] for s in families["ina_switch_collisions"].samples} == set(SWITCHES)
    rate = next(s for s in families["ina_job_rate_gbps"].samples if s.labels["job"] == "A")
    assert rate.value == controller["session"].plan.task("A", "t0").rate_gbps
    assert _call(address, "GET", "/healthz")[1]["status"] == "ok"
    topology = _call(address, "GET", "/topology")[1]
    assert {s["name"] for s in topology["switches"]} == set(SWITCHES)
    schema = _call(address, "GET", "/openapi.json")[1]
    assert {"/jobs", "/jobs/{job_id}", "/topology", "/healthz", "/metrics"} <= set(schema["paths"])
    assert schema["components"]["schemas"]["JobRequest"]["additionalProperties"] is False


def test_ina_job_submits_lists_shows_and_deletes_over_the_api(controller, tmp_path):
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    common = ["--state", str(controller["state"]), "--token-file", str(token)]

    def ina(*args):
        return subprocess.run(
            [sys.executable, "-m", "controller.cli", "job", *args, *common],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    made = ina("submit", "--workers", "H04,H05", "--ps", "H13", "--name", "cli", "--json")
    assert made.returncode == 0, made.stderr
    job = json.loads(made.stdout)
    assert job["tasks"][0]["ps"] == "H13"
    listed = ina("list")
    assert listed.returncode == 0 and "cli" in listed.stdout and "A " in listed.stdout
    refused = ina("submit", "--workers", "H04", "--ps", "H10")
    assert refused.returncode == 1 and "(HTTP 409)" in refused.stderr
    unknown = ina("show", "30")
    assert unknown.returncode == 2 and "no job 30" in unknown.stderr
    ended = ina("delete", str(job["id"]))
    assert ended.returncode == 0 and "0 left on the switches" in ended.stdout
    assert "Traceback" not in made.stderr + refused.stderr + unknown.stderr


def test_an_api_off_loopback_without_a_token_is_refused_at_start(tmp_path):
    topology = tmp_path / "t.yaml"
    topology.write_text(yaml.safe_dump(cluster_doc()))
    switches = tmp_path / "switches.json"
    switches.write_text(json.dumps({"L0": {"address": f"127.0.0.1:{free_port()}"}}))
    base = [
        sys.executable,
        "-m",
        "controller.cli",
        "controller",
        str(topology),
        "--switches",
        str(switches),
        "--state",
        str(tmp_path / "state.json"),
        "--connect-timeout",
        "1",
    ]
    proc = subprocess.run(
        [*base, "--api", "0.0.0.0:0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2 and "--api-token-file" in proc.stdout
    proc = subprocess.run(
        [*base, "--api", "127.0.0.1:0", "--api-token-file", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "cannot read it" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    with pytest.raises(api.ApiConfigError, match="HOST:PORT"):
        api.listen("localhost:http", None)
    sock = api.listen("0", None)  # a port alone: on loopback
    assert sock.getsockname()[0] == "127.0.0.1"
    sock.close()
