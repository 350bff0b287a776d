"""OpenFlow 1.3 driver for plain (INA-agnostic) switches run as Open vSwitch.

A plain switch cannot parse the INA header, but every INA packet carries its flow id in the UDP
source port (p4src/README.md), and flow ids are unique across a plan, so the switch can still
realise exactly the planned paths: one rule per flow leaving it, and a group of type ALL per
task replicating the result flow down the result tree. The decisions themselves (flow ids, next
hops, result trees, host routes) come from `controller.program`, so OVS and the P4 switches
install the same plan. Two tables:

* table 0, INA traffic (UDP destination port 20033): CONTROL packets (ECN CE; they keep the
  data packet's source port but travel back to its sender) go to table 1; a known flow goes
  out of its planned port, or to its result group; an unknown flow is dropped, as the P4
  pipeline drops a miss in `ina_forward`; everything else goes to table 1;
* table 1, IPv4: a /32 route per host, as `ipv4_lpm`; a miss (ARP, IPv6, ...) is dropped.

The controller is an os-ken app. Ryu 4.34 does not run on Python 3.11: it does not build with
current setuptools and, built by hand, fails at import (`cannot import name 'ALREADY_HANDLED'
from 'eventlet.wsgi'`), while older eventlet releases break on 3.11 in other ways. os-ken,
OpenStack's maintained fork, keeps Ryu's app model and runs on native threads; it ships no
`osken-manager` CLI, so `serve` starts the app through `cfg.CONF` and `AppManager` itself, and
`python -m controller.southbound.openflow` is its command line.

Switches are told apart by datapath id: switch `network.switches[i]` has datapath id i + 1
(the device id the P4 switches get), set on the bridge by `add_bridge`. `start_ovs_switches`
is what the Mininet runner calls: bridges on the switches' interfaces plus the controller
process, which publishes `{"switches": {NAME: {"pushes_seconds": [...]}}}` (the P4 daemon's
shape) after every (re)install.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from os_ken import cfg
from os_ken.base.app_manager import AppManager, OSKenApp
from os_ken.controller import controller as _registers_ofp_options  # noqa: F401
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controller.network import Network, TopologyError, load_topology
from controller.plan import Plan, PlanFormatError, load_plan
from controller.program import (
    CompileError,
    Numbering,
    flow_routes,
    host_routes,
    number_tasks,
    result_children,
)

INA_UDP_PORT = 20033  # p4src/README.md "Packet format"
ECN_CE = 3
ETH_IPV4 = 0x0800
IP_UDP = 17
TABLE_INA, TABLE_IPV4 = 0, 1
PRIO_CONTROL, PRIO_FLOW, PRIO_UNKNOWN_FLOW, PRIO_HOST, PRIO_MISS = 300, 200, 100, 100, 0
DEFAULT_LISTEN = "127.0.0.1:6653"

log = logging.getLogger(__name__)


class OpenFlowError(RuntimeError):
    """Open vSwitch or the OpenFlow controller failed; the message says which and why."""


@dataclass(frozen=True)
class FlowRule:
    """One OpenFlow flow entry; `match` uses OXM field names (os-ken's OFPMatch keywords).

    Exactly one of `output`, `group`, `goto_table` is set, or none: the packet is dropped."""

    table: int
    priority: int
    match: dict[str, int | str]
    output: int | None = None
    group: int | None = None
    goto_table: int | None = None


@dataclass(frozen=True)
class GroupRule:
    """A group of type ALL: one bucket per port, each outputting a copy of the packet."""

    group_id: int
    ports: tuple[int, ...]


@dataclass
class SwitchTables:
    """Everything one plain switch gets; installed after wiping what the switch held."""

    switch: str
    datapath_id: int
    flows: list[FlowRule] = field(default_factory=list)
    groups: list[GroupRule] = field(default_factory=list)

    def flow_ports(self) -> dict[int, int]:
        """Flow id → output port of the per-flow rules, to compare with the plan."""
        return {r.match["udp_src"]: r.output for r in self.flows
                if r.priority == PRIO_FLOW and r.output is not None}

    def result_ports(self) -> dict[int, tuple[int, ...]]:
        """Result flow id → ports its group replicates to."""
        groups = {g.group_id: g.ports for g in self.groups}
        return {r.match["udp_src"]: groups[r.group] for r in self.flows if r.group is not None}


def datapath_id(network: Network, switch: str) -> int:
    """The runner's device id of the switch, so that one number names it on either target."""
    return network.switches.index(switch) + 1


def _ina(**extra: int) -> dict[str, int | str]:
    return {"eth_type": ETH_IPV4, "ip_proto": IP_UDP, "udp_dst": INA_UDP_PORT, **extra}


def compile_openflow(network: Network, plan: Plan, version: int = 1) -> dict[str, SwitchTables]:
    """The OpenFlow rules of every plain switch for `plan` as plan `version`; raises
    CompileError where `controller.program` would."""
    ids = Numbering(network)
    tables = {s: SwitchTables(s, datapath_id(network, s))
              for s in network.switches if not network.is_ina(s)}
    for switch, t in tables.items():
        t.flows += [
            FlowRule(TABLE_INA, PRIO_CONTROL, _ina(ip_ecn=ECN_CE), goto_table=TABLE_IPV4),
            FlowRule(TABLE_INA, PRIO_UNKNOWN_FLOW, _ina()),
            FlowRule(TABLE_INA, PRIO_MISS, {}, goto_table=TABLE_IPV4),
            *(FlowRule(TABLE_IPV4, PRIO_HOST, {"eth_type": ETH_IPV4, "ipv4_dst": ip}, output=port)
              for ip, port in host_routes(network, ids, switch).items()),
            FlowRule(TABLE_IPV4, PRIO_MISS, {}),
        ]
    for task in number_tasks(network, plan, version):
        for (switch, flow_id), port in flow_routes(network, task).items():
            if switch in tables:
                tables[switch].flows.append(
                    FlowRule(TABLE_INA, PRIO_FLOW, _ina(udp_src=flow_id), output=port))
        for switch, ports in result_children(network, task).items():
            if switch in tables:
                # The result flow id is unique across the plan, so it can name the group too.
                tables[switch].groups.append(GroupRule(task.result_flow, tuple(ports)))
                tables[switch].flows.append(FlowRule(
                    TABLE_INA, PRIO_FLOW, _ina(udp_src=task.result_flow), group=task.result_flow))
    return tables


# -- Open vSwitch bridges (ovs-vsctl), shared by the tests and the Mininet runner

def add_bridge(bridge: str, dpid: int, ports: dict[int, str], controller: str) -> None:
    """Create a userspace-datapath OVS bridge whose OpenFlow port numbers are the topology's.

    fail-mode secure: without a controller the bridge forwards nothing (never floods like a
    learning switch); max_backoff 1 s: it reconnects quickly after a controller restart."""
    cmd = ["ovs-vsctl", "--", "--may-exist", "add-br", bridge,
           "--", "set", "bridge", bridge, "datapath_type=netdev", "protocols=OpenFlow13",
           "fail-mode=secure", f"other-config:datapath-id={dpid:016x}",
           "other-config:disable-in-band=true",
           "--", "set-controller", bridge, f"tcp:{controller}"]
    for port, iface in sorted(ports.items()):
        cmd += ["--", "--may-exist", "add-port", bridge, iface,
                "--", "set", "interface", iface, f"ofport_request={port}"]
    _run(cmd)
    _run(["ovs-vsctl", "set", "controller", bridge, "max_backoff=1000"])


def del_bridge(bridge: str) -> None:
    subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], check=False,
                   capture_output=True)


def ensure_ovs_running() -> None:
    """Start ovsdb-server and ovs-vswitchd if they are not running (a fresh CI machine)."""
    if _ovs_answers():
        return
    for start in (["service", "openvswitch-switch", "start"],
                  ["/usr/share/openvswitch/scripts/ovs-ctl", "start"]):
        subprocess.run(start, capture_output=True, check=False)
        if _ovs_answers():
            return
    raise OpenFlowError("Open vSwitch is not running and could not be started "
                        "(install openvswitch-switch: make setup)")


def _ovs_answers() -> bool:
    return subprocess.run(["ovs-vsctl", "--timeout=3", "show"], check=False,
                          capture_output=True).returncode == 0


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise OpenFlowError(f"{cmd[0]} failed: {done.stderr.strip()}")


# -- the os-ken app

class PlainSwitchApp(OSKenApp):
    """Installs each known switch's rules whenever it connects, after wiping its old state:
    a reconnect after a switch or controller restart gets exactly the plan again."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]  # noqa: RUF012 (os-ken reads this attribute)

    def __init__(self, *args, ina_tables: dict[str, SwitchTables], ina_state: Path | None,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.by_dpid = {t.datapath_id: t for t in ina_tables.values()}
        self.state = ina_state
        self.pushes: dict[str, list[float]] = {s: [] for s in ina_tables}
        self.pending: dict[tuple[int, int], tuple[str, float]] = {}  # (dpid, barrier xid)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_connected(self, ev) -> None:
        dp = ev.msg.datapath
        started = time.monotonic()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        tables = self.by_dpid.get(dp.id)
        if tables is None:
            log.warning("datapath %016x is no plain switch of the topology: left empty", dp.id)
            return
        for group in tables.groups:
            buckets = [parser.OFPBucket(actions=[parser.OFPActionOutput(p)]) for p in group.ports]
            dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_ALL,
                                           group_id=group.group_id, buckets=buckets))
        for rule in tables.flows:
            dp.send_msg(parser.OFPFlowMod(
                dp, table_id=rule.table, priority=rule.priority, command=ofp.OFPFC_ADD,
                match=parser.OFPMatch(**rule.match), instructions=_instructions(rule, dp)))
        barrier = parser.OFPBarrierRequest(dp)
        dp.set_xid(barrier)
        self.pending[(dp.id, barrier.xid)] = (tables.switch, started)
        dp.send_msg(barrier)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def installed(self, ev) -> None:
        done = self.pending.pop((ev.msg.datapath.id, ev.msg.xid), None)
        if done is None:
            return
        switch, started = done
        self.pushes[switch].append(round(time.monotonic() - started, 4))
        tables = self.by_dpid[ev.msg.datapath.id]
        log.info("%s: %d flows, %d groups installed", switch, len(tables.flows),
                 len(tables.groups))
        if self.state is not None:
            write_state(self.state, self.pushes)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev) -> None:
        log.error("datapath %016x refused a message: type %d code %d", ev.msg.datapath.id,
                  ev.msg.type, ev.msg.code)


def _instructions(rule: FlowRule, dp) -> list:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if rule.goto_table is not None:
        return [parser.OFPInstructionGotoTable(rule.goto_table)]
    if rule.output is not None:
        actions = [parser.OFPActionOutput(rule.output)]
    elif rule.group is not None:
        actions = [parser.OFPActionGroup(rule.group)]
    else:
        return []  # no instruction: drop
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]


def serve(tables: dict[str, SwitchTables], listen: str, state: Path | None = None) -> None:
    """Run `PlainSwitchApp` until the process is stopped; blocks.

    `AppManager.run_apps` cannot hand the app its rules, so this does the same steps with two
    extra keyword arguments, which os-ken's own apps ignore."""
    host, port = listen.rsplit(":", 1)
    cfg.CONF(args=["--ofp-listen-host", host, "--ofp-tcp-listen-port", port], project="os_ken")
    manager = AppManager.get_instance()
    manager.load_apps(["controller.southbound.openflow"])
    services = manager.instantiate_apps(**manager.create_contexts(), ina_tables=tables,
                                        ina_state=state)
    try:
        hub.joinall(services)
    finally:
        manager.close()


def write_state(path: Path, pushes: dict[str, list[float]]) -> None:
    """Atomically publish, per switch, how long each (re)install took (readers poll the file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"switches": {s: {"pushes_seconds": p}
                                            for s, p in pushes.items()}}))
    os.replace(tmp, path)


def controller_command(topology: Path, plan: Path, listen: str, state: Path,
                       version: int = 1) -> list[str]:
    return [sys.executable, "-m", "controller.southbound.openflow", "--topology", str(topology),
            "--plan", str(plan), "--listen", listen, "--state", str(state),
            "--plan-version", str(version), "--log-level", "warning"]


def wait_programmed(state: Path, switches: list[str], proc: subprocess.Popen,
                    timeout: float = 20.0, pushes: int = 1) -> None:
    """Block until every switch in `switches` was installed at least `pushes` times."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OpenFlowError(f"OpenFlow controller exited (code {proc.returncode})")
        if state.exists():
            done = json.loads(state.read_text())["switches"]
            if all(len(done.get(s, {}).get("pushes_seconds", ())) >= pushes for s in switches):
                return
        time.sleep(0.05)
    raise OpenFlowError(f"OpenFlow controller did not program {', '.join(switches)} "
                        f"within {timeout:g} s")


@dataclass
class OvsSwitches:
    """Plain switches emulated as OVS bridges, and the OpenFlow controller programming them."""

    bridges: dict[str, str]  # switch → bridge name
    command: list[str]  # the controller's command line
    state: Path
    log_file: IO[bytes]
    proc: subprocess.Popen | None = None

    def start_controller(self, timeout: float) -> float:
        """Start the controller and wait until every bridge holds the plan; returns how long
        that took. Bridges keep their flows while it is away (fail-mode secure)."""
        self.state.unlink(missing_ok=True)
        started = time.monotonic()
        self.proc = subprocess.Popen(self.command, stdout=self.log_file, stderr=subprocess.STDOUT)
        wait_programmed(self.state, list(self.bridges), self.proc, timeout)
        # Flows the datapath cached from the old tables go on being used until a revalidation
        # round has run (late under load): only then do packets follow the new tables.
        _run(["ovs-appctl", "revalidator/wait"])
        return time.monotonic() - started

    def stop_controller(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        """Stop the controller, delete the bridges; safe to call twice."""
        self.stop_controller()
        for bridge in self.bridges.values():
            del_bridge(bridge)
        self.log_file.close()


def start_ovs_switches(network: Network, plan: Plan, switch_ports: dict[str, dict[int, str]],
                       workdir: Path, *, version: int = 1, timeout: float = 30.0) -> OvsSwitches:
    """Run the plain switches named in `switch_ports` (switch → {port: interface}, interfaces in
    the root namespace) as OVS bridges under a new OpenFlow controller; returns once all of
    them hold the plan. Writes plan, state and log to `workdir`; `close()` undoes it all."""
    ina = [s for s in switch_ports if network.is_ina(s)]
    if ina:
        raise OpenFlowError(f"INA switch(es) {', '.join(ina)} cannot run as Open vSwitch")
    if not Path(network.source).is_file():
        raise OpenFlowError("the OpenFlow controller loads the topology from its file, and "
                            f"this network has none ({network.source})")
    ensure_ovs_running()
    plan_file = workdir / "openflow-plan.json"
    plan.save(plan_file)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{sock.getsockname()[1]}"
    state = workdir / "openflow-state.json"
    # Bridge names become interface names (at most 15 characters), unique per process.
    bridges = {s: f"ina{os.getpid() % 100000}s{datapath_id(network, s)}" for s in switch_ports}
    ovs = OvsSwitches(bridges, controller_command(Path(network.source), plan_file, listen,
                                                  state, version),
                      state, (workdir / "openflow-controller.log").open("ab"))
    try:
        for switch, ports in switch_ports.items():
            add_bridge(bridges[switch], datapath_id(network, switch), ports, listen)
        ovs.start_controller(timeout)
    except BaseException:
        ovs.close()
        raise
    return ovs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controller.southbound.openflow",
        description="OpenFlow 1.3 controller installing a plan's per-flow forwarding on the "
                    "plain switches (Open vSwitch) of a topology.")
    parser.add_argument("--topology", type=Path, required=True)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--plan-version", type=int, default=1)
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT (default %(default)s)")
    parser.add_argument("--state", type=Path, help="JSON file: install times per switch")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        network = load_topology(args.topology)
        tables = compile_openflow(network, load_plan(args.plan), args.plan_version)
    except (OSError, TopologyError, PlanFormatError, CompileError) as exc:
        print(f"openflow controller: {exc}", file=sys.stderr)
        return 2
    serve(tables, args.listen, args.state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
