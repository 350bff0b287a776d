"""Link discovery: probe codec, the monitor's verdicts, and two embedded switches on a veth pair
driven by finsy as the controller drives them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from conftest import ROOT
from finsy import Controller, Switch, SwitchOptions

from controller.network import Network, build_network
from controller.southbound.discovery import LinkMonitor, parse_probe, probe_frame
from controller.southbound.p4runtime import EMBEDDED_BLOB, P4INFO
from dataplane.demo import free_tcp_port


def _two_switches() -> Network:
    """S1 - S2 (port 1 at both ends), a PS under S1 and a worker under S2."""
    return build_network({
        "name": "two-switches",
        "hosts": [{"name": "PS", "role": "ps"}, {"name": "W0", "role": "worker"}],
        "switches": [{"name": "S1", "ina": True}, {"name": "S2", "ina": True}],
        "links": [{"a": "S1", "b": "S2", "capacity_gbps": 1},
                  {"a": "PS", "b": "S1", "capacity_gbps": 1},
                  {"a": "W0", "b": "S2", "capacity_gbps": 1}],
        "jobs": [{"name": "job0", "tasks": [{"name": "t0", "ps": "PS", "workers": ["W0"]}]}],
    })


def test_probe_names_its_sender_and_other_frames_are_not_probes() -> None:
    frame = probe_frame("leaf-7", 12)
    assert parse_probe(frame) == ("leaf-7", 12)
    assert parse_probe(frame[:12] + b"\x08\x00" + frame[14:]) is None
    assert parse_probe(frame[:16] + b"\x05" + frame[17:]) is None  # other chassis-id subtype


class _FakeSwitch:
    """Stands in for a finsy Switch where only the name matters."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_a_link_dies_after_missing_rounds_and_revives_on_the_next_probe() -> None:
    network = _two_switches()
    changes: list[frozenset] = []
    monitor = LinkMonitor([_FakeSwitch("S1"), _FakeSwitch("S2")], network,  # type: ignore[list-item]
                          dead_after=2, on_change=changes.append)
    assert set(monitor.expected.values()) == {("S1", "S2"), ("S2", "S1")}
    port = network.graph.edges["S1", "S2"]["out_port"]
    back = network.graph.edges["S1", "S2"]["in_port"]
    monitor.round = 1
    monitor.arrived("S2", back, probe_frame("S1", port))
    monitor.arrived("S2", back + 1, probe_frame("S1", port))  # wrong port: not this link
    assert monitor.alive_links() == {("S1", "S2")}
    monitor.round = 2
    monitor._judge()
    assert monitor.dead_links() == {("S2", "S1")} and changes == [{("S2", "S1")}]
    monitor.round = 3
    monitor._judge()
    assert monitor.dead_links() == {("S1", "S2"), ("S2", "S1")}
    monitor.arrived("S1", port, probe_frame("S2", back))
    assert monitor.dead_links() == {("S1", "S2")}
    assert monitor.changed.is_set() and len(changes) == 3


def test_a_dead_link_comes_back_only_after_probes_in_a_row() -> None:
    """Probes lost to congestion must not make a busy link flap: revive_after=3."""
    network = _two_switches()
    monitor = LinkMonitor([_FakeSwitch("S1"), _FakeSwitch("S2")], network,  # type: ignore[list-item]
                          dead_after=2, revive_after=3)
    port = network.graph.edges["S1", "S2"]["out_port"]
    back = network.graph.edges["S1", "S2"]["in_port"]
    link = ("S1", "S2")

    def probe_in_round(r: int) -> None:
        monitor.round = r
        monitor.arrived("S2", back, probe_frame("S1", port))

    probe_in_round(1)
    monitor.round = 3
    monitor._judge()
    assert link in monitor.dead_links()
    probe_in_round(4)
    probe_in_round(5)
    assert link in monitor.dead_links()  # two rounds in a row: not yet
    monitor.round = 7  # a round missed: the run starts again
    probe_in_round(7)
    probe_in_round(8)
    assert link in monitor.dead_links()
    probe_in_round(9)
    assert link not in monitor.dead_links()
    monitor.round = 10
    monitor._judge()
    assert link not in monitor.dead_links()  # alive links die only after dead_after rounds


def test_a_link_whose_probes_are_lost_stays_alive_while_its_counter_moves() -> None:
    """Congestion drops probes but not the link: frames counted at the far end's port
    (`port_packets`) keep it alive; a port that receives nothing dies as before."""
    network = _two_switches()
    monitor = LinkMonitor([_FakeSwitch("S1"), _FakeSwitch("S2")], network,  # type: ignore[list-item]
                          dead_after=2)
    back = network.graph.edges["S1", "S2"]["in_port"]  # S2's port of S1 -> S2
    there = network.graph.edges["S2", "S1"]["in_port"]  # S1's port of S2 -> S1
    for r, packets in enumerate((10, 25, 40, 41, 90), start=1):
        monitor.round = r
        monitor.counted("S2", back, packets)
        monitor.counted("S1", there, 7)  # S2 -> S1 delivers nothing
        monitor._judge()
    assert monitor.dead_links() == {("S2", "S1")}
    assert ("S1", "S2") in monitor.alive_links()
    assert monitor.saved_by_traffic == 4  # rounds 2-5: probes alone had judged it dead
    monitor.round = 6
    monitor.counted("S2", back, 3)  # the switch restarted: counting from 0 proves nothing
    monitor.round = 7
    monitor._judge()
    assert ("S1", "S2") not in monitor.dead_links()  # one flat answer: too early to judge
    monitor.counted("S2", back, 3)  # a second answer, still nothing new: dead
    assert monitor.dead_links() == {("S1", "S2"), ("S2", "S1")}
    monitor.counted("S2", back, 5)
    assert monitor.dead_links() == {("S2", "S1")}


def test_a_switch_that_does_not_answer_counter_reads_delays_the_verdict() -> None:
    """Probes missing and the far end's counter read once, then silent (a loaded switch):
    no verdict until it answers again; a switch without the counter is judged by probes."""
    network = _two_switches()
    monitor = LinkMonitor([_FakeSwitch("S1"), _FakeSwitch("S2")], network,  # type: ignore[list-item]
                          dead_after=2)
    back = network.graph.edges["S1", "S2"]["in_port"]
    monitor.round = 1
    monitor.counted("S2", back, 10)
    monitor.round = 5
    monitor._judge()
    assert ("S1", "S2") not in monitor.dead_links()
    assert ("S2", "S1") in monitor.dead_links()  # S1 was never read: probes alone
    monitor.counted("S2", back, 10)
    assert ("S1", "S2") in monitor.dead_links()


# *** two embedded switches on a veth pair

def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def veth() -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:6]
    ends = (f"ld{tag}a", f"ld{tag}b")
    _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
    try:
        for end in ends:
            _ip("link", "set", end, "up")
        yield ends
    finally:
        subprocess.run(["ip", "link", "del", ends[0]], check=False, capture_output=True)


async def _until(monitor: LinkMonitor, test, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not test():
            monitor.changed.clear()
            try:
                await asyncio.wait_for(monitor.changed.wait(), 0.2)
            except TimeoutError:
                pass


@pytest.mark.root
def test_two_embedded_switches_link_dies_and_comes_back(veth: tuple[str, str]) -> None:
    network = _two_switches()
    ports = {"S1": network.graph.edges["S1", "S2"]["out_port"],
             "S2": network.graph.edges["S2", "S1"]["out_port"]}
    addresses = {name: f"127.0.0.1:{free_tcp_port()}" for name in ports}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "dataplane", "switch", "--device-id", "1", "--grpc-addr",
         addresses[name], "-i", f"{ports[name]}@{end}", "--log-level", "warning"], cwd=ROOT)
        for name, end in zip(ports, veth, strict=True)]
    both = {("S1", "S2"), ("S2", "S1")}

    async def scenario() -> None:
        switches = [Switch(name, address, SwitchOptions(p4info=P4INFO, p4blob=EMBEDDED_BLOB))
                    for name, address in addresses.items()]
        async with Controller(switches):
            monitor = LinkMonitor(switches, network, interval=0.3, dead_after=3)
            task = asyncio.create_task(monitor.run())
            try:
                await _until(monitor, lambda: monitor.alive_links() == both, 15)
                assert monitor.dead_links() == frozenset()
                _ip("link", "set", veth[0], "down")
                await _until(monitor, lambda: monitor.dead_links() == both, 5)
                assert monitor.alive_links() == frozenset()
                _ip("link", "set", veth[0], "up")
                await _until(monitor, lambda: monitor.alive_links() == both, 5)
                assert monitor.dead_links() == frozenset()
            finally:
                task.cancel()

    try:
        asyncio.run(scenario())
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
