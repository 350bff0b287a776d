"""Jobs at run time with real packets, on Mininet (root), on both targets: job B submitted
through the API (real HTTP) while job A's iteration is on the wire, B's agents following the
API by its name from their hosts; both jobs' sums exact; B deleted while A runs, its entries
gone from every switch; a job that does not fit refused with nothing changed. The switches'
entries are read back by a P4Runtime client of our own, not the controller's driver.

Both jobs are planned by ARO (shortest paths aggregate nowhere) and aggregate at the same
switch (L0, where both jobs' two workers sit), so their job ids and slot regions are what
keeps their sums apart. Every worker checks its result against
the numpy sum of the synthetic gradients of its job (`ina worker --verify`), each PS its own
sums and counts (`finished`, `miscounted`: each fragment counted once).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import MININET
from test_api import _call, _groups, _held, _of_job

from controller.emulation.management import BRIDGE
from controller.emulation.mininet_runner import Emulation, _tx_packets
from controller.model.network import load_topology
from controller.solvers import solve
from dataplane.bmv2 import HOW_TO_GET_BMV2
from dataplane.p4build import HOW_TO_GET_P4C, compiler_path
from dataplane.schema import load_p4info

pytestmark = MININET

BMV2 = [
    pytest.mark.skipif(shutil.which("simple_switch_grpc") is None, reason=HOW_TO_GET_BMV2),
    pytest.mark.skipif(compiler_path() is None, reason=HOW_TO_GET_P4C),
]
# Gradient sizes (MB) per target: A's iteration lasts a few seconds at the target's link
# scale (2 Mbps per model Gbps embedded, 0.5 on bmv2), B's is smaller so that it runs while
# A's is still on the wire.
SIZES = {"embedded": (1.0, 0.25), "bmv2": (0.25, 0.06)}
B = {"name": "B", "workers": ["B0", "B1"], "ps": "PB", "gradient_mb": 10, "scheme": "aro"}


def _doc() -> dict:
    """L0 holds A's and B's workers (and an idle C0), L1 their PSs, S0 joins them; every
    switch INA. Host links 1 Gbps, leaf-spine links 2: A and B each get 1 Gbps, and the PS
    links are full."""
    under = {"L0": ["A0", "A1", "B0", "B1", "C0"], "L1": ["PA", "PB"]}
    hosts = [{"name": h, "role": "idle"} for leaf in under.values() for h in leaf]
    roles = {"A0": "worker", "A1": "worker", "PA": "ps"}
    for host in hosts:
        host["role"] = roles.get(host["name"], "idle")
    links = [
        {"a": h, "b": leaf, "capacity_gbps": 1} for leaf, names in under.items() for h in names
    ]
    links += [{"a": leaf, "b": "S0", "capacity_gbps": 2} for leaf in under]
    return {
        "name": "two-jobs",
        "hosts": hosts,
        "switches": [
            {"name": "L0", "tier": "leaf", "ina": True},
            {"name": "L1", "tier": "leaf", "ina": True},
            {"name": "S0", "tier": "spine", "ina": True},
        ],
        "links": links,
        "jobs": [{"name": "A", "tasks": [{"name": "t0", "ps": "PA", "workers": ["A0", "A1"]}]}],
    }


def _reader(emu: Emulation):
    """`held()`: every switch's entries and groups, read by our own P4Runtime client with the
    P4Info the switches run (p4c's for bmv2)."""
    switches = json.loads((emu.workdir / "switches.json").read_text())
    addresses = {name: s["address"] for name, s in switches.items()}
    device_ids = {name: s["device_id"] for name, s in switches.items()}
    p4info = load_p4info()
    if "--p4info" in emu.program_args:
        p4info = load_p4info(Path(emu.program_args[emu.program_args.index("--p4info") + 1]))
    return lambda: _held(addresses, p4info, device_ids)


def _in_background(work, box: dict):
    """`work()` as `Emulation.iterate`'s `during`, its exception kept for the test."""

    def during() -> None:
        try:
            work()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    return during


@pytest.mark.parametrize("target", ["embedded", pytest.param("bmv2", marks=BMV2)])
def test_job_b_joins_and_leaves_while_a_runs_every_sum_exact(target, tmp_path):
    path = tmp_path / "two-jobs.yaml"
    path.write_text(yaml.safe_dump(_doc()))
    network = load_topology(path)
    a_mb, b_mb = SIZES[target]
    with Emulation(network, solve(network, "aro"), target=target, api=True) as emu:
        address, token = emu.api_url.removeprefix("http://"), emu.api_token
        held = _reader(emu)
        ps_port = emu._ps_port(emu.plan.tasks[0])
        (alone,) = emu.iterate(a_mb, 1, timeout=120)
        before_b = held()

        # B's agents start first, following the API by the name B will be submitted under.
        b_agents = emu.start_job("B", B["workers"], B["ps"], b_mb, 2, seed=102)
        box: dict = {}

        def submit_b() -> None:
            emu.wait_for_traffic(packets=50, timeout=60)
            box["post"] = _call(address, "POST", "/jobs", B, token=token)
            box["a_packets_at_post"] = _tx_packets(ps_port) - box["a_base"]
            box["b"] = emu.finish_job(b_agents, timeout=120, ready_timeout=120)

        box["a_base"] = _tx_packets(ps_port)
        try:
            (beside_b,) = emu.iterate(a_mb, 2, timeout=180, during=_in_background(submit_b, box))
        finally:
            b_agents.kill()  # only those still running: after a failure
        if "error" in box:
            raise box["error"]
        status, b = box["post"]
        assert status == 201, b
        with_b = held()

        refused = _call(address, "POST", "/jobs", {"workers": ["C0"], "ps": "PA"}, token=token)
        after_refusal = held()
        jobs = _call(address, "GET", "/jobs", token=token)[1]

        def delete_b() -> None:
            emu.wait_for_traffic(packets=50, timeout=60)
            box["delete"] = _call(address, "DELETE", f"/jobs/{b['id']}", token=token)

        (during_delete,) = emu.iterate(a_mb, 3, timeout=120, during=_in_background(delete_b, box))
        gone = held()
        (after,) = emu.iterate(a_mb, 4, timeout=120)

    assert "error" not in box, box.get("error")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f" {BRIDGE}:" not in links, "the management bridge was left behind"
    # A, alone and then beside B, and with B deleted mid-iteration and after: exact
    for it in (alone, beside_b, during_delete, after):
        assert it.exact and it.ps_exact, it
        assert it.ps_report["miscounted"] == 0
        assert it.ps_report["finished"] == it.ps_report["fragments"]
    # B was installed while A's iteration was on the wire, and its own iteration was exact
    assert box["a_packets_at_post"] < beside_b.ps_link_packets
    run = box["b"]
    assert run.exact, (run.workers, run.ps)
    assert set(run.workers) == {"B0", "B1"} and run.ps["fragments"] > 0
    # ...aggregated at the switch A aggregates at, under its own job id and slot region
    a_view = next(v for v in jobs if v["name"] == "A")
    shared = {p["switch"] for p in a_view["tasks"][0]["aggregation"]} & {
        p["switch"] for p in b["tasks"][0]["aggregation"]
    }
    assert "L0" in shared
    # one flow per fragment reached each PS: both jobs' two workers merged (at L0)
    assert run.ps["flows_per_fragment"] == 1, run.ps
    assert [it.ps_flows for it in (alone, beside_b, during_delete, after)] == [1] * 4
    assert b["id"] != a_view["id"]
    regions = sorted(
        (v["slot_region"]["base"], v["slot_region"]["base"] + v["slot_region"]["count"])
        for v in jobs
    )
    assert regions[0][1] <= regions[1][0]
    # The switches held B's entries as the controller answered, A's untouched
    assert _of_job(with_b, a_view["id"]) == _of_job(before_b, a_view["id"])
    assert {
        n: len(e) - _groups(with_b[n], b["id"]) for n, e in _of_job(with_b, b["id"]).items()
    } == {n: b["entries"].get(n, 0) for n in with_b}
    assert any(_of_job(with_b, b["id"]).values())
    # A job that does not fit is refused with its reason, and nothing installed changes
    assert refused[0] == 409 and refused[1]["reason"] == "capacity", refused
    assert after_refusal == with_b
    assert sorted(v["name"] for v in jobs) == ["A", "B"]
    # B deleted: gone from every switch, everything else exactly as before B came
    status, removal = box["delete"]
    assert status == 200 and not any(removal["left_on_switches"].values()), removal
    assert not any(_of_job(gone, b["id"]).values())
    assert gone == before_b
    seconds = [f"{it.seconds:.2f}" for it in (alone, beside_b, during_delete, after)]
    b_seconds = max(r["seconds"] for r in run.workers.values())
    print(f"{target}: A's iterations {', '.join(seconds)} s; B's {b_seconds:.2f} s")
