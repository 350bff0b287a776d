"""Shared fixtures: small topologies built in memory, and the repository's paths."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from controller.model.network import Network, build_network

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "topologies" / "examples"


def leaf_spine_doc(
    leaves: int,
    spines: int,
    workers_per_leaf: list[int],
    *,
    ina: set[str] = frozenset(),
    pipelines: int = 1,
    capacity: float = 1.0,
) -> dict:
    """A leaf-spine document: PS under L0, `workers_per_leaf[i]` workers under leaf i."""
    hosts = [{"name": "PS", "role": "ps"}]
    links = [{"a": "PS", "b": "L0", "capacity_gbps": capacity}]
    workers = []
    for leaf, count in enumerate(workers_per_leaf):
        for k in range(count):
            name = f"W{leaf}_{k}"
            workers.append(name)
            hosts.append({"name": name, "role": "worker"})
            links.append({"a": name, "b": f"L{leaf}", "capacity_gbps": capacity})
    switches = []
    for s in range(spines):
        switches.append(
            {
                "name": f"S{s}",
                "tier": "spine",
                "ina": f"S{s}" in ina,
                "pipelines": pipelines if f"S{s}" in ina else 1,
            }
        )
    for leaf in range(leaves):
        name = f"L{leaf}"
        switches.append(
            {
                "name": name,
                "tier": "leaf",
                "ina": name in ina,
                "pipelines": pipelines if name in ina else 1,
            }
        )
        for s in range(spines):
            links.append({"a": name, "b": f"S{s}", "capacity_gbps": capacity})
    for sw in switches:  # a switch needs at least one port per pipeline
        degree = sum(sw["name"] in (link["a"], link["b"]) for link in links)
        if sw["pipelines"] > degree:
            sw["ports"] = sw["pipelines"]
    return {
        "name": "test-leaf-spine",
        "hosts": hosts,
        "switches": switches,
        "links": links,
        "jobs": [{"name": "job0", "tasks": [{"name": "t0", "ps": "PS", "workers": workers}]}],
    }


@pytest.fixture
def fig1() -> Network:
    """ARO Fig. 1: W0,W1 under L1, W2,W3 under L2, W4 under L3; L1, L2, S1 INA."""
    return build_network(leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L1", "L2", "S1"}))


CLUSTER_LEAVES, PER_LEAF = 3, 6


def cluster_doc(host_gbps: float = 10, spine_gbps: float = 40) -> dict:
    """Leaves L0..L2 under spine S0, all INA; hosts H<leaf><k>; job A (H00, H01 -> H10)."""
    hosts, links = [], []
    for leaf in range(CLUSTER_LEAVES):
        for k in range(PER_LEAF):
            hosts.append({"name": f"H{leaf}{k}", "role": "idle"})
            links.append({"a": f"H{leaf}{k}", "b": f"L{leaf}", "capacity_gbps": host_gbps})
        links.append({"a": f"L{leaf}", "b": "S0", "capacity_gbps": spine_gbps})
    roles = {"H00": "worker", "H01": "worker", "H10": "ps"}
    for host in hosts:
        host["role"] = roles.get(host["name"], "idle")
    switches = [{"name": f"L{leaf}", "tier": "leaf", "ina": True} for leaf in range(CLUSTER_LEAVES)]
    switches.append({"name": "S0", "tier": "spine", "ina": True})
    return {
        "name": "api-cluster",
        "hosts": hosts,
        "switches": switches,
        "links": links,
        "jobs": [{"name": "A", "tasks": [{"name": "t0", "ps": "H10", "workers": ["H00", "H01"]}]}],
    }


HOSTS = [f"H{leaf}{k}" for leaf in range(CLUSTER_LEAVES) for k in range(PER_LEAF)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


API_SWITCHES = ["L0", "L1", "L2", "S0"]


def switch_process(address: str) -> subprocess.Popen:
    """An `ina switch` (the embedded target) serving P4Runtime on `address`, without
    interfaces; the caller waits for it to listen and stops it."""
    command = [sys.executable, "-m", "controller.cli", "switch", "--grpc-addr", address]
    return subprocess.Popen(
        [*command, "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def running_api(tmp: Path, token: str | None, **serve):
    """A daemon with the API on 127.0.0.1:0 (`serve`: `api.attach`'s TLS options), in a
    thread of this process, programming one embedded switch process per switch of
    `cluster_doc`; yields its address, session, switches, topology and state file."""
    from controller.service import api, daemon
    from controller.service.admission import initial_layout
    from controller.solvers import solve
    from controller.southbound.p4runtime import SwitchTarget

    addresses = {name: f"127.0.0.1:{free_port()}" for name in API_SWITCHES}
    procs = [switch_process(address) for address in addresses.values()]
    doc = cluster_doc()
    network = build_network(doc)
    session = daemon.Session(
        network,
        solve(network, "shortest"),
        {n: SwitchTarget(n, a) for n, a in addresses.items()},
        tmp / "state.json",
        layout=initial_layout(network, 128),
    )
    api.attach(
        session,
        api.listen("127.0.0.1:0", token),
        token,
        scheme="shortest",
        time_limit=None,
        seed=0,
        **serve,
    )
    loop = asyncio.new_event_loop()
    task = loop.create_task(daemon.run(session, connect_timeout=30, probe_interval=None))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 40
        while not session.started and time.monotonic() < deadline:
            time.sleep(0.1)
        assert session.started, "the switches were not programmed"
        yield {
            "address": session.api_address,
            "session": session,
            "switches": addresses,
            "doc": doc,
            "state": tmp / "state.json",
        }
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(timeout=20)
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def embedded_switch(embedded_switch_process):
    """An `ina switch` process without interfaces (enough for P4Runtime, no root); its
    address once it listens."""
    return embedded_switch_process[0]


@pytest.fixture
def embedded_switch_process():
    """`embedded_switch` as (address, process), for a test that stops or kills it."""
    address = f"127.0.0.1:{free_port()}"
    proc = switch_process(address)
    host, port = address.split(":")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield address, proc
    proc.send_signal(signal.SIGCONT)  # a stopped process takes SIGTERM only once continued
    proc.terminate()
    proc.wait(timeout=20)  # its own bound is switch.STOP_SECONDS; the rest is a loaded machine


# Module marks of every test that builds a Mininet network: it needs root, and it must leave
# the machine's root namespace as it found it (a leftover interface breaks every later run).
MININET = [
    pytest.mark.mininet,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root (CI runs as root)"),
    pytest.mark.usefixtures("nothing_left_behind"),
]


@pytest.fixture
def nothing_left_behind():
    yield
    leftovers = subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True, check=False
    ).stdout
    assert "-eth" not in leftovers, "Mininet interfaces left behind"


def partial_doc() -> dict:
    """Partial aggregation by hand: W1, W2 under S1, S1 - S2, W3 and the PS under S2."""
    hosts = [{"name": n, "role": "worker"} for n in ("W1", "W2", "W3")]
    return {
        "name": "partial-by-hand",
        "hosts": [*hosts, {"name": "PS", "role": "ps"}],
        "switches": [{"name": "S1", "ina": True}, {"name": "S2", "ina": True}],
        "links": [
            {"a": a, "b": b, "capacity_gbps": 10}
            for a, b in (("W1", "S1"), ("W2", "S1"), ("S1", "S2"), ("W3", "S2"), ("PS", "S2"))
        ],
        "jobs": [
            {"name": "j", "tasks": [{"name": "t", "ps": "PS", "workers": ["W1", "W2", "W3"]}]}
        ],
    }


def partial_plan():
    """S1 merges the first half of W1's and W2's fragments, S2 the first three quarters of
    what enters it (S1's sums, and W1, W2 and W3 raw): segments [0, .5), [.5, .75), [.75, 1)
    bring the PS 1, 1 and 3 flows per fragment (1.5 on average)."""
    from controller.model.plan import AggregationPoint, Plan, TaskPlan

    paths = {
        "W1": ["W1", "S1", "S2", "PS"],
        "W2": ["W2", "S1", "S2", "PS"],
        "W3": ["W3", "S2", "PS"],
    }
    points = [
        AggregationPoint("S1", 0, 2, "S2", None, 0.5),
        AggregationPoint("S2", 0, 4, "PS", None, 0.75),
    ]
    return Plan(
        "hand", "heuristic", 1.0, None, 0.0, None, [TaskPlan("j", "t", "PS", 1.0, paths, points)]
    )


def embedded_command(address: str) -> list[str]:
    """The embedded switch (`python -m dataplane switch`) on `address`, without ports."""
    return [
        sys.executable,
        "-m",
        "dataplane",
        "switch",
        "--grpc-addr",
        address,
        "--log-level",
        "warning",
    ]


def start_portless_switch(
    kind: str, address: str | None = None, options: Sequence[str] = ()
) -> tuple[subprocess.Popen, str]:
    """A switch of `kind` without ports (P4Runtime only: no root needed) on `address` (a free
    loopback port by default) with simple_switch_grpc's server `options` (both targets take
    them), and its address."""
    from dataplane.bmv2 import bmv2_command, wait_listening
    from dataplane.targets import missing

    if reason := missing(kind):
        pytest.skip(reason)
    address = address or f"127.0.0.1:{free_port()}"
    if kind == "bmv2":
        command = [*bmv2_command({}, address), *options]
    else:
        command = [*embedded_command(address), *options]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(address, process)
    return process, address


def program_files(kind: str) -> dict:
    """The P4Info and device config a controller pushes to a switch of `kind`."""
    from controller.southbound.p4runtime import EMBEDDED_BLOB, P4INFO
    from dataplane.p4build import compile_for_bmv2

    if kind == "bmv2":
        built = compile_for_bmv2()
        return {"p4info": built.p4info, "p4blob": built.json}
    return {"p4info": P4INFO, "p4blob": EMBEDDED_BLOB}
