"""Plain switches over OpenFlow 1.3: the rules compiled from a plan, then the same rules on a
real Open vSwitch bridge (userspace datapath) programmed by the os-ken app, with INA packets.

The plan on ARO Fig. 1 sends W0, W1 through L1 (merged there) and S0, W2, W3 through L2
(merged) and S1, and W4 un-merged through L3 and S0, so all three plain switches (L0, L3, S0)
carry flows and results. Flow ids in plan order: W0..W4 = 1..5, L1's merged flow 6, L2's 7,
the result flow 8. Ports: leaves have hosts first, then S0, then S1; spines have L0..L3 on 1..4.

Plan version 2 (`_plan_v2`, link L2–S1 cut) sends L2's merged flow up through S0 as well; its
flow ids are the same in generation 1 (from 2**14), so its result group on S0 reaches L0..L2.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from conftest import EXAMPLES
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.compiler.program import Numbering, compile_plan
from controller.model.network import Network, load_topology
from controller.model.plan import AggregationPoint, Plan, TaskPlan
from controller.service import daemon
from controller.southbound.openflow import (
    PRIO_FLOW,
    TABLE_INA,
    TABLE_IPV4,
    OpenFlowError,
    OvsSwitches,
    compile_openflow,
    start_ovs_switches,
)
from dataplane.frame import CONTROL, DATA, ECN_CE, INA_UDP_PORT, RESULT
from dataplane.netns import VethNet
from dataplane.packet import INA

FLOW_W0, FLOW_W4, FLOW_L1, FLOW_L2, RESULT_FLOW = 1, 5, 6, 7, 8
V2 = 1 << 14  # the first flow id of plan version 2
FLOW2_W4, FLOW2_L1, FLOW2_L2, RESULT2_FLOW = V2 + 4, V2 + 5, V2 + 6, V2 + 7
DRAIN = 0.5  # seconds the old version stays after the hosts switched


def _network() -> Network:
    return load_topology(EXAMPLES / "aro-fig1.yaml")


def _plan(l2_spine: str = "S1") -> Plan:
    leaf = {"W0": "L1", "W1": "L1", "W2": "L2", "W3": "L2", "W4": "L3"}
    spine = {"W0": "S0", "W1": "S0", "W2": l2_spine, "W3": l2_spine, "W4": "S0"}
    paths = {w: [w, leaf[w], spine[w], "L0", "PS"] for w in leaf}
    points = [AggregationPoint("L1", 0, 2, "S0"), AggregationPoint("L2", 0, 2, l2_spine)]
    return Plan(
        "hand", "heuristic", 1.0, None, 0.0, 0, [TaskPlan("job0", "t0", "PS", 1.0, paths, points)]
    )


def _plan_v2() -> Plan:
    """The re-plan after the link L2–S1 was cut."""
    return _plan(l2_spine="S0")


# -- compilation


def test_plain_switches_get_exactly_the_planned_flows():
    tables = compile_openflow(_network(), _plan())
    assert set(tables) == {"L0", "L3", "S0"}  # L1, L2, S1 are INA switches (P4Runtime)
    assert tables["L3"].flow_ports() == {FLOW_W4: 2}
    # W0's and W1's own flows end at L1: S0 only knows their merged flow.
    assert tables["S0"].flow_ports() == {FLOW_L1: 1, FLOW_W4: 1}
    assert tables["L0"].flow_ports() == {FLOW_W4: 1, FLOW_L1: 1, FLOW_L2: 1}
    assert tables["L0"].result_ports() == {RESULT_FLOW: (2, 3)}
    assert tables["S0"].result_ports() == {RESULT_FLOW: (2, 4)}
    assert tables["L3"].result_ports() == {RESULT_FLOW: (1,)}
    assert [t.datapath_id for t in tables.values()] == [1, 4, 5]


def test_plain_switches_forward_as_the_p4_program_would():
    network, plan = _network(), _plan()
    programs, _ = compile_plan(network, plan)
    for switch, tables in compile_openflow(network, plan).items():
        p4 = {
            e.match["flow_id"]: e.action.args["port"]
            for e in programs[switch].table_entries
            if e.table_id == "ina_forward"
        }
        assert tables.flow_ports() == p4


def test_a_new_version_gets_its_own_flow_ids_and_groups():
    network = _network()
    old = compile_openflow(network, _plan())["S0"]
    new = compile_openflow(network.without_links({("L2", "S1")}), _plan_v2(), 2)["S0"]
    assert new.flow_ports() == {FLOW2_L1: 1, FLOW2_L2: 1, FLOW2_W4: 1}
    assert new.result_ports() == {RESULT2_FLOW: (2, 3, 4)}
    assert not {g.group_id for g in old.groups} & {g.group_id for g in new.groups}


def test_control_packets_and_other_traffic_go_by_destination():
    network = _network()
    s0 = compile_openflow(network, _plan())["S0"]
    control = next(r for r in s0.flows if r.match.get("ip_ecn") == ECN_CE)
    assert control.goto_table == TABLE_IPV4 and control.priority > PRIO_FLOW
    routes = {r.match["ipv4_dst"]: r.output for r in s0.flows if "ipv4_dst" in r.match}
    ip = Numbering(network).host_ip
    assert routes == {ip["PS"]: 1, ip["W0"]: 2, ip["W1"]: 2, ip["W2"]: 3, ip["W3"]: 3, ip["W4"]: 4}
    misses = [r for r in s0.flows if r.match == {}]
    assert [(r.table, r.goto_table, r.output) for r in misses] == [
        (TABLE_INA, TABLE_IPV4, None),
        (TABLE_IPV4, None, None),
    ]  # the last one drops


# -- a real OVS bridge as S0


@dataclass
class Bridge:
    ovs: OvsSwitches
    sockets: dict[int, socket.socket]
    ip: dict[str, str]


@pytest.fixture(scope="module")
def s0(tmp_path_factory) -> Iterator[Bridge]:
    """S0 as an OVS bridge whose ports 1..4 lead to veth ends in a namespace."""
    network = _network()
    with VethNet(4) as net:
        ovs = start_ovs_switches(
            network, _plan(), {"S0": net.switch_if}, tmp_path_factory.mktemp("openflow")
        )
        try:
            yield Bridge(
                ovs, {p: net.host_socket(p) for p in net.host_if}, Numbering(network).host_ip
            )
            assert ovs.proc.poll() is None, "the OpenFlow controller died during the tests"
        finally:
            ovs.close()


def _frame(flow: int, flags: int, frag: int, src: str, dst: str, ecn: int = 0) -> bytes:
    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src=src, dst=dst, tos=ecn)
        / UDP(sport=flow, dport=INA_UDP_PORT, chksum=0)
        / INA(flags=flags, flow_id=flow, frag_id=frag)
    )


def _exchange(
    bridge: Bridge, sends: list[tuple[int, bytes]], wait: float = 0.8
) -> dict[int, list[tuple[int, int]]]:
    """Send (port, frame) pairs; return per port the sorted (udp_src, frag_id) of the INA
    frames that came out (frames from different ports may be forwarded in any order)."""
    for sock in bridge.sockets.values():  # leftovers of an earlier test
        while select.select([sock], [], [], 0)[0]:
            sock.recv(65535)
    for port, frame in sends:
        bridge.sockets[port].send(frame)
    seen: dict[int, list[tuple[int, int]]] = {p: [] for p in bridge.sockets}
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        for sock in select.select(list(bridge.sockets.values()), [], [], left)[0]:
            frame, address = sock.recvfrom(65535)
            pkt = Ether(frame)
            if address[2] != socket.PACKET_OUTGOING and INA in pkt:
                port = next(p for p, s in bridge.sockets.items() if s is sock)
                seen[port].append((pkt[UDP].sport, pkt[INA].frag_id))
    return {p: sorted(frames) for p, frames in seen.items()}


@pytest.mark.root
def test_each_flow_leaves_on_its_planned_port_only(s0: Bridge):
    seen = _exchange(
        s0,
        [
            (2, _frame(FLOW_L1, DATA, 11, s0.ip["W0"], s0.ip["PS"])),
            (4, _frame(FLOW_W4, DATA, 12, s0.ip["W4"], s0.ip["PS"])),
        ],
    )
    assert seen == {1: [(FLOW_W4, 12), (FLOW_L1, 11)], 2: [], 3: [], 4: []}


@pytest.mark.root
def test_result_is_replicated_to_every_child(s0: Bridge):
    seen = _exchange(s0, [(1, _frame(RESULT_FLOW, RESULT, 21, s0.ip["PS"], s0.ip["W0"]))])
    assert seen == {1: [], 2: [(RESULT_FLOW, 21)], 3: [], 4: [(RESULT_FLOW, 21)]}


@pytest.mark.root
def test_unknown_flows_are_dropped(s0: Bridge):
    seen = _exchange(
        s0,
        [
            (2, _frame(FLOW_W0, DATA, 31, s0.ip["W0"], s0.ip["PS"])),  # merged at L1, never on S0
            (2, _frame(999, DATA, 32, s0.ip["W0"], s0.ip["PS"])),
            (3, _frame(FLOW_L2, DATA, 33, s0.ip["W2"], s0.ip["PS"])),  # planned through S1
        ],
    )
    assert seen == {1: [], 2: [], 3: [], 4: []}


@pytest.mark.root
def test_control_packet_goes_back_to_its_sender(s0: Bridge):
    """Same source port as L1's merged flow (planned out of port 1), but ECN CE and addressed
    to W0: it must leave toward W0, not follow the flow."""
    seen = _exchange(s0, [(1, _frame(FLOW_L1, CONTROL, 41, s0.ip["PS"], s0.ip["W0"], ECN_CE))])
    assert seen == {1: [], 2: [(FLOW_L1, 41)], 3: [], 4: []}


@pytest.mark.root
def test_restarted_controller_reinstalls_exactly_the_plan(s0: Bridge):
    """While the controller is away the bridge loses a flow and gains a stray one; when a new
    controller connects, the plan is back and the stray flow is gone."""
    ofctl = ["ovs-ofctl", "-O", "OpenFlow13"]
    bridge = s0.ovs.bridges["S0"]
    s0.ovs.stop_controller()
    subprocess.run([*ofctl, "del-flows", bridge, f"udp,tp_src={FLOW_L1}"], check=True)
    subprocess.run([*ofctl, "del-groups", bridge], check=True)
    subprocess.run(
        [
            *ofctl,
            "add-flow",
            bridge,
            f"priority=250,udp,tp_dst={INA_UDP_PORT},tp_src=999,actions=output:3",
        ],
        check=True,
    )
    packet = [(2, _frame(FLOW_L1, DATA, 51, s0.ip["W0"], s0.ip["PS"]))]
    stray = [(2, _frame(999, DATA, 52, s0.ip["W0"], s0.ip["PS"]))]
    result = [(1, _frame(RESULT_FLOW, RESULT, 53, s0.ip["PS"], s0.ip["W0"]))]
    assert _exchange(s0, packet + stray + result) == {1: [], 2: [], 3: [(999, 52)], 4: []}
    s0.ovs.start_controller(timeout=20)
    assert _exchange(s0, packet + stray + result) == {
        1: [(FLOW_L1, 51)],
        2: [(RESULT_FLOW, 53)],
        3: [],
        4: [(RESULT_FLOW, 53)],
    }


# -- a bridge following the daemon's plan versions


@pytest.fixture
def following(tmp_path) -> Iterator[tuple[Bridge, daemon.Session]]:
    """S0 as an OVS bridge whose controller follows a daemon session's state file (a session
    without P4 switches: its state file and its staging are the daemon's own code)."""
    network = _network()
    session = daemon.Session(network, _plan(), {}, tmp_path / "state.json")
    session.publish()
    with VethNet(4) as net:
        ovs = start_ovs_switches(
            network,
            _plan(),
            {"S0": net.switch_if},
            tmp_path,
            follow_state=session.state_file,
            drain_seconds=DRAIN,
        )
        session.openflow_state = ovs.state
        try:
            yield (
                Bridge(
                    ovs, {p: net.host_socket(p) for p in net.host_if}, Numbering(network).host_ip
                ),
                session,
            )
            assert ovs.proc.poll() is None, "the OpenFlow controller died during the test"
        finally:
            ovs.close()


def _replan_to_v2(session: daemon.Session) -> None:
    """What `daemon.replan` does once it has solved: stage for the plain switches (returns
    when they confirmed), then publish to the hosts."""
    session.dead_links = {("L2", "S1")}
    asyncio.run(daemon.stage_for_plain_switches(session, _plan_v2(), 2))
    assert json.loads(session.state_file.read_text())["version"] == 1  # hosts not told yet
    session.version, session.plan = 2, _plan_v2()
    session.publish()


def _sends(bridge: Bridge, frag: int) -> tuple[list, list]:
    """(plan v1's, plan v2's) L2 merged flow, L1 merged flow and result at S0."""
    ip = bridge.ip
    v1 = [
        (2, _frame(FLOW_L1, DATA, frag, ip["W0"], ip["PS"])),
        (1, _frame(RESULT_FLOW, RESULT, frag + 1, ip["PS"], ip["W0"])),
    ]
    v2 = [
        (3, _frame(FLOW2_L2, DATA, frag + 2, ip["W2"], ip["PS"])),
        (1, _frame(RESULT2_FLOW, RESULT, frag + 3, ip["PS"], ip["W0"])),
    ]
    return v1, v2


def _both_forwarded(frag: int) -> dict[int, list[tuple[int, int]]]:
    return {
        1: [(FLOW_L1, frag), (FLOW2_L2, frag + 2)],
        2: [(RESULT_FLOW, frag + 1), (RESULT2_FLOW, frag + 3)],
        3: [(RESULT2_FLOW, frag + 3)],
        4: [(RESULT_FLOW, frag + 1), (RESULT2_FLOW, frag + 3)],
    }


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _openflow_state(bridge: Bridge) -> dict:
    return json.loads(bridge.ovs.state.read_text())


@pytest.mark.root
def test_new_version_is_forwarded_before_hosts_switch_and_old_one_deleted_after_drain(following):
    bridge, session = following
    v1, v2 = _sends(bridge, 100)
    assert _exchange(bridge, v2) == {1: [], 2: [], 3: [], 4: []}  # v2 unknown so far
    _replan_to_v2(session)
    assert _exchange(bridge, v1 + v2) == _both_forwarded(100)
    assert _wait_for(lambda: _openflow_state(bridge)["versions"] == [2], timeout=DRAIN + 10)
    assert _openflow_state(bridge)["version"] == 2
    assert _exchange(bridge, v1 + v2) == {
        1: [(FLOW2_L2, 102)],
        2: [(RESULT2_FLOW, 103)],
        3: [(RESULT2_FLOW, 103)],
        4: [(RESULT2_FLOW, 103)],
    }


@pytest.mark.root
def test_bridge_reconnecting_mid_handover_gets_both_versions(following):
    bridge, session = following
    session.dead_links = {("L2", "S1")}
    asyncio.run(daemon.stage_for_plain_switches(session, _plan_v2(), 2))  # hosts still on v1
    pushes = len(_openflow_state(bridge)["switches"]["S0"]["pushes_seconds"])
    subprocess.run(["ovs-appctl", "bridge/reconnect", bridge.ovs.bridges["S0"]], check=True)
    assert _wait_for(
        lambda: len(_openflow_state(bridge)["switches"]["S0"]["pushes_seconds"]) > pushes
    )
    subprocess.run(["ovs-appctl", "revalidator/wait"], check=True)
    v1, v2 = _sends(bridge, 200)
    assert _exchange(bridge, v1 + v2) == _both_forwarded(200)
    assert _openflow_state(bridge)["versions"] == [1, 2]


@pytest.mark.root
def test_restarted_daemon_numbering_from_1_again_is_installed_from_scratch(following):
    bridge, session = following
    _replan_to_v2(session)
    assert _wait_for(lambda: _openflow_state(bridge)["versions"] == [2], timeout=DRAIN + 10)
    # A new daemon writes the same file, starting again at version 1 with its first plan.
    daemon.Session(_network(), _plan(), {}, session.state_file).publish()
    assert _wait_for(lambda: _openflow_state(bridge)["versions"] == [1])
    v1, v2 = _sends(bridge, 300)
    assert _exchange(bridge, v1 + v2) == {
        1: [(FLOW_L1, 300)],
        2: [(RESULT_FLOW, 301)],
        3: [],
        4: [(RESULT_FLOW, 301)],
    }


def test_ina_switches_cannot_run_as_ovs(tmp_path):
    with pytest.raises(OpenFlowError, match=r"INA switch.*S1"):
        start_ovs_switches(_network(), _plan(), {"S1": {1: "unused"}}, tmp_path)
