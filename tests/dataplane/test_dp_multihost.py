"""Several hosts' workers in one process (dataplane/multihost.py): each host keeps its own socket
in its own namespace and its own flows, and every host's sum is exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_dp_shards import PS_PORTS, RANGES, WORKERS, _program, _shared_options, _start_pss, _state

from dataplane.bmv2 import free_tcp_port
from dataplane.multihost import HostsFileError, SharedPlanWatcher, StateCache, load_hosts
from dataplane.netns import VethNet
from dataplane.p4rt_client import Client
from dataplane.targets import missing, program_for, start_target

ROOT = Path(__file__).resolve().parents[2]


def test_a_hosts_file_without_a_field_is_refused_naming_it(tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(
        json.dumps(
            [
                {
                    "name": "w0",
                    "netns": "/proc/1/ns/net",
                    "iface": "a",
                    "ip": "10.0.0.1",
                    "index": 0,
                    "flow_id": 1,
                    "next_node": 0,
                }
            ]
        )
    )
    with pytest.raises(HostsFileError, match="host 0 lacks ps_ip"):
        load_hosts(hosts)
    hosts.write_text("{}")
    with pytest.raises(HostsFileError, match="non-empty JSON list"):
        load_hosts(hosts)


def test_watchers_sharing_a_state_cache_each_see_a_new_plan_version_once(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state()))
    cache = StateCache(state)
    watchers = [
        SharedPlanWatcher(state, lambda r, w=w: (r["worker"], r["task_id"]) == (w, 0), cache=cache)
        for w in ("w0", "w1")
    ]
    assert [w.poll(0.0)["flow_id"] for w in watchers] == [1, 2]
    assert [w.poll(1.0) for w in watchers] == [None, None]  # no change: nothing new
    newer = _state()
    newer["version"] = 2
    for row in newer["workers"]:
        row["flow_id"] += 1000
    state.write_text(json.dumps(newer))
    assert [w.poll(2.0)["flow_id"] for w in watchers] == [1001, 1002]


@pytest.mark.root
def test_one_process_serves_every_worker_and_each_sum_is_exact(tmp_path):
    """The sharded job of test_dp_shards (3 workers, 2 PSs on one switch), its three workers
    served by one `python -m dataplane workers` process instead of three `ina worker`s."""
    reason = missing("embedded")
    if reason:
        pytest.skip(reason)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state()))
    program = program_for("embedded")
    with VethNet(WORKERS + len(PS_PORTS)) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target("embedded", net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            _program(client)
            common = _shared_options(state)
            pss = _start_pss(net, common)
            hosts = tmp_path / "hosts.json"
            hosts.write_text(
                json.dumps(
                    [
                        {
                            "name": f"w{i}",
                            "netns": f"/var/run/netns/{net.ns}",
                            "iface": net.host_if[i + 1],
                            "ip": f"10.0.0.{i + 1}",
                            "index": i,
                            "flow_id": i + 1,
                            "next_node": 0,
                            "ps_ip": "10.0.0.4",
                        }
                        for i in range(WORKERS)
                    ]
                )
            )
            agent = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dataplane",
                    "workers",
                    "--hosts",
                    str(hosts),
                    "--verify",
                    *common,
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            out = agent.communicate(timeout=300)[0]
            ps_reports = [json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for p in pss]
            client.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    reports = [json.loads(line) for line in out.splitlines()]
    assert agent.returncode == 0, out
    assert [r["name"] for r in reports] == [f"w{i}" for i in range(WORKERS)]
    assert all(r["exact"] for r in reports), reports
    for r in reports:
        assert [(s["task"], s["first_fragment"], s["fragments"]) for s in r["shards"]] == [
            (0, 0, 717),
            (1, 717, 307),
        ]
    for task, (lo, hi) in enumerate(RANGES):
        assert ps_reports[task]["exact"], ps_reports[task]
        assert (ps_reports[task]["first_fragment"], ps_reports[task]["fragments"]) == (lo, hi - lo)
