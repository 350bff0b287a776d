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

Plan versions follow the daemon's, make-before-break (`--follow-state`, the daemon's state
file). A re-plan must never let a host send a flow id that a plain switch would drop, and the
daemon tells the hosts about a new version in that very file, so the daemon leads and waits:

1. the daemon installs version v+1 on the P4 switches beside v, then writes v+1 into its state
   file under `staged` (`version`, `plan`, `dead_links`) while `version` and `workers`, what the
   hosts follow, stay at v;
2. this app polls the file, compiles the staged plan on the topology minus its dead links
   exactly as the daemon compiles it for the P4 switches, adds the rules and groups beside v's,
   confirms them with a barrier per switch and a datapath revalidation round, and writes
   `"version": v+1` to its own state file;
3. the daemon, started with `--openflow-state` naming that file, waits for it (bounded: a dead
   app must not freeze the network) and only then publishes v+1 to the hosts;
4. once the published version reaches v+1, the older versions are deleted after the drain
   time (the daemon's), as the daemon deletes them on the P4 switches.

Versions cannot collide: version v uses generation (v − 1) mod 4 of the flow ids, the result
flow id names its group, and every rule carries its version as cookie, so a version is deleted
by cookie. The rules every version shares (control packets, host routes, misses) are re-added
by the newer version with the same match, which replaces the old rule and its cookie, so they
survive the old version's deletion. A switch that (re)connects is wiped and gets every version
held, oldest first: the current one, and during a handover or a drain the other one too. A
daemon that restarts numbers from 1 again: the app then reinstalls from scratch. Without
`--follow-state` the app holds its one plan; following a daemon that does not wait, it installs
a version once the hosts already have it, and their first packets under it may be dropped
(workers resend them).

Switches are told apart by datapath id: switch `network.switches[i]` has datapath id i + 1
(the device id the P4 switches get), set on the bridge by `add_bridge`. `start_ovs_switches`
is what the Mininet runner calls: bridges on the switches' interfaces plus the controller
process, which publishes `{"version": V, "versions": [...], "switches": {NAME:
{"pushes_seconds": [...]}}}` (the P4 daemon's shape for the switches) after every (re)install
and every version added or deleted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from os_ken import cfg
from os_ken.base.app_manager import AppManager, OSKenApp
from os_ken.controller import controller as _registers_ofp_options  # noqa: F401
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controller.network import Network, TopologyError, load_topology
from controller.plan import Plan, PlanFormatError, load_plan
from controller.program import (
    CompileError,
    Numbering,
    flow_routes,
    generation,
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
COOKIE_MASK = (1 << 64) - 1  # a rule's cookie is its plan version, matched exactly
_BRIDGE_SERIAL = itertools.count()

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


# -- following the daemon's plan versions

@dataclass(frozen=True)
class Announced:
    """A plan version read from the daemon's state file (see `read_daemon_state`)."""

    version: int
    plan: Plan
    dead_links: frozenset[tuple[str, str]] = frozenset()


UNREADABLE = (OSError, ValueError, KeyError, TypeError)  # a missing or foreign state file


def read_daemon_state(path: Path) -> tuple[Announced, Announced | None]:
    """(the version the hosts follow, the version the daemon stages for the plain switches
    before it publishes it, if any); raises one of UNREADABLE on a file not the daemon's."""
    state = json.loads(path.read_text())
    staged = state.get("staged")
    return _announced(state), _announced(staged) if staged else None


def _announced(entry: dict) -> Announced:
    return Announced(int(entry["version"]), Plan.from_dict(entry["plan"]),
                     frozenset(tuple(link) for link in entry.get("dead_links", ())))


@dataclass(frozen=True)
class Follow:
    """How the app follows the daemon (`--follow-state`)."""

    network: Network
    daemon_state: Path
    # Seconds between the hosts switching to a new version and the old one's deletion: the
    # daemon's own drain time, so both kinds of switch retire a version together.
    drain_seconds: float = 2.0
    poll_seconds: float = 0.05

    def compile(self, announced: Announced) -> dict[int, SwitchTables]:
        """What `daemon.replan` compiles for the P4 switches, for the plain ones."""
        view = self.network.without_links(set(announced.dead_links))
        return _by_dpid(compile_openflow(view, announced.plan, announced.version))


def _by_dpid(tables: dict[str, SwitchTables]) -> dict[int, SwitchTables]:
    return {t.datapath_id: t for t in tables.values()}


# -- the os-ken app

class PlainSwitchApp(OSKenApp):
    """Keeps every plain switch holding the plan versions in use: the newest, and the older
    ones until they have drained. A switch that connects is wiped and gets all of them, so a
    reconnect after a switch or controller restart gets exactly the plans again; with
    `ina_follow`, versions the daemon announces are added beside the old ones (make) and the
    old ones deleted after the drain time (break)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]  # noqa: RUF012 (os-ken reads this attribute)

    def __init__(self, *args, ina_tables: dict[str, SwitchTables], ina_state: Path | None,
                 ina_version: int = 1, ina_follow: Follow | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.names = {t.datapath_id: t.switch for t in ina_tables.values()}
        self.versions = {ina_version: _by_dpid(ina_tables)}  # version → datapath id → tables
        self.confirmed = self.published = ina_version
        self.retire_at: dict[int, float] = {}  # version → time.monotonic() of its deletion
        self.state = ina_state
        self.follow = ina_follow
        self.pushes: dict[str, list[float]] = {s: [] for s in ina_tables}
        self.datapaths: dict[int, object] = {}  # connected switches, by datapath id
        self.pending: dict[tuple[int, int], tuple[str, float]] = {}  # (dpid, barrier xid)
        self.acks: dict[tuple[int, int], threading.Event] = {}
        # Sends to a switch happen in os-ken's event thread (connects) and in the follower
        # thread (new versions, retirements); one lock keeps each batch whole and ordered.
        self.lock = threading.RLock()
        self.state_lock = threading.Lock()

    def start(self):
        super().start()
        if self.follow is not None:
            self.threads.append(hub.spawn(self._follow_daemon))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_connected(self, ev) -> None:
        dp = ev.msg.datapath
        started = time.monotonic()
        with self.lock:
            _wipe(dp)
            if dp.id not in self.names:
                log.warning("datapath %016x is no plain switch of the topology: left empty",
                            dp.id)
                return
            for version, tables in sorted(self.versions.items()):  # the newest wins shared rules
                _send_tables(dp, tables[dp.id], version)
            self.datapaths[dp.id] = dp
            self.pending[(dp.id, _barrier(dp))] = (self.names[dp.id], started)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def switch_gone(self, ev) -> None:
        with self.lock:
            if self.datapaths.get(ev.datapath.id) is ev.datapath:
                del self.datapaths[ev.datapath.id]

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def installed(self, ev) -> None:
        key = (ev.msg.datapath.id, ev.msg.xid)
        if (ack := self.acks.pop(key, None)) is not None:
            ack.set()
            return
        done = self.pending.pop(key, None)
        if done is None:
            return
        switch, started = done
        self.pushes[switch].append(round(time.monotonic() - started, 4))
        log.info("%s: plan version(s) %s installed", switch, sorted(self.versions))
        self._write_state()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev) -> None:
        log.error("datapath %016x refused a message: type %d code %d", ev.msg.datapath.id,
                  ev.msg.type, ev.msg.code)

    # -- following the daemon (runs in its own thread)

    def _follow_daemon(self) -> None:
        stamp = None
        while self.is_active:
            time.sleep(self.follow.poll_seconds)
            try:
                mtime = self.follow.daemon_state.stat().st_mtime_ns
                if mtime != stamp:
                    self.follow_state(*read_daemon_state(self.follow.daemon_state))
                    stamp = mtime
            except UNREADABLE as exc:
                log.debug("daemon state not readable yet: %s", exc)
            self.retire_due(time.monotonic())

    def follow_state(self, published: Announced, staged: Announced | None) -> None:
        """Make the switches hold what the daemon's state file announces."""
        if published.version < self.published:
            log.warning("the daemon's plan version went back to %d: it restarted; "
                        "reinstalling from scratch", published.version)
            self.replace_all(published)
        newest = max((published, staged or published), key=lambda a: a.version)
        if newest.version > max(self.versions):
            self.add_version(newest)
        if published.version > self.published:  # the hosts switched: drain the older ones
            self.published = published.version
            deadline = time.monotonic() + self.follow.drain_seconds
            for version in self.versions:
                if version < published.version:
                    self.retire_at.setdefault(version, deadline)

    def add_version(self, announced: Announced) -> None:
        """Make: install `announced` beside what the switches hold; returns once every
        connected switch confirmed it (barrier) and the datapath caches were revalidated."""
        try:
            tables = self.follow.compile(announced)
        except CompileError as exc:
            log.error("plan version %d cannot be installed: %s", announced.version, exc)
            return
        with self.lock:
            for old in [v for v in self.versions if generation(v) == generation(
                    announced.version)]:
                log.warning("plan v%d reuses the flow ids of v%d, still installed: deleting "
                            "v%d now", announced.version, old, old)
                self._retire(old)
            self.versions[announced.version] = tables
            for dp in self.datapaths.values():
                _send_tables(dp, tables[dp.id], announced.version)
            synced = self._barriers()
        self._await(synced)
        self.confirmed = announced.version
        log.info("plan v%d installed beside %s", announced.version,
                 sorted(set(self.versions) - {announced.version}))
        self._write_state()

    def retire_due(self, now: float) -> None:
        """Break: delete the versions whose drain time is over."""
        with self.lock:
            due = [v for v, at in self.retire_at.items() if at <= now]
            for version in due:
                self._retire(version)
            synced = self._barriers() if due else {}
        if due:
            self._await(synced)
            log.info("plan version(s) %s deleted", due)
            self._write_state()

    def replace_all(self, announced: Announced) -> None:
        """Hold `announced` only: the daemon restarted and numbers its versions anew."""
        try:
            tables = self.follow.compile(announced)
        except CompileError as exc:
            log.error("plan version %d cannot be installed: %s", announced.version, exc)
            return
        with self.lock:
            self.versions = {announced.version: tables}
            self.retire_at.clear()
            self.confirmed = self.published = announced.version
            for dp in self.datapaths.values():
                _wipe(dp)
                _send_tables(dp, tables[dp.id], announced.version)
            synced = self._barriers()
        self._await(synced)
        self._write_state()

    def _retire(self, version: int) -> None:
        """Delete `version`'s rules and groups; the lock is held. Rules a newer version
        re-added with the same match (host routes, misses) carry its cookie and stay."""
        for dp in self.datapaths.values():
            _delete_version(dp, self.versions[version][dp.id], version)
        del self.versions[version]
        self.retire_at.pop(version, None)

    def _barriers(self) -> dict[int, tuple[object, threading.Event]]:
        """A barrier to every connected switch; the lock is held."""
        synced = {}
        for dpid, dp in self.datapaths.items():
            ack = threading.Event()
            barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
            self.acks[(dpid, dp.set_xid(barrier))] = ack
            dp.send_msg(barrier)
            synced[dpid] = (dp, ack)
        return synced

    def _await(self, synced: dict[int, tuple[object, threading.Event]],
               timeout: float = 10.0) -> None:
        """Wait for the barriers' replies (a switch that disconnects meanwhile gets everything
        when it reconnects), then for a revalidation round: until one has run, the datapath
        goes on using flows it cached from the old tables."""
        deadline = time.monotonic() + timeout
        for dpid, (dp, ack) in synced.items():
            while not ack.wait(0.05) and self.datapaths.get(dpid) is dp:
                if time.monotonic() > deadline:
                    log.warning("%s did not confirm within %g s", self.names[dpid], timeout)
                    break
        if synced:
            _revalidate()

    def _write_state(self) -> None:
        if self.state is None:
            return
        with self.lock:
            versions = sorted(self.versions)
        with self.state_lock:
            write_state(self.state, self.pushes, self.confirmed, versions)


def _wipe(dp) -> None:
    """Delete every flow and group the switch holds."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(parser.OFPFlowMod(dp, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                                  out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
    dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))


def _send_tables(dp, tables: SwitchTables, version: int) -> None:
    """Add one version's groups, then its rules, which carry the version as cookie."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    for group in tables.groups:
        buckets = [parser.OFPBucket(actions=[parser.OFPActionOutput(p)]) for p in group.ports]
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_ALL,
                                       group_id=group.group_id, buckets=buckets))
    for rule in tables.flows:
        dp.send_msg(parser.OFPFlowMod(
            dp, cookie=version, table_id=rule.table, priority=rule.priority,
            command=ofp.OFPFC_ADD, match=parser.OFPMatch(**rule.match),
            instructions=_instructions(rule, dp)))


def _delete_version(dp, tables: SwitchTables, version: int) -> None:
    """Delete the rules whose cookie is `version`, then the version's groups."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(parser.OFPFlowMod(dp, cookie=version, cookie_mask=COOKIE_MASK,
                                  table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                                  out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
    for group in tables.groups:
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=group.group_id))


def _barrier(dp) -> int:
    barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
    xid = dp.set_xid(barrier)
    dp.send_msg(barrier)
    return xid


def _revalidate() -> None:
    done = subprocess.run(["ovs-appctl", "revalidator/wait"], check=False, capture_output=True,
                          text=True)
    if done.returncode != 0:
        log.warning("ovs-appctl revalidator/wait failed: %s", done.stderr.strip())


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


def serve(tables: dict[str, SwitchTables], listen: str, state: Path | None = None, *,
          version: int = 1, follow: Follow | None = None) -> None:
    """Run `PlainSwitchApp` with `tables` as plan `version` until the process is stopped;
    blocks.

    `AppManager.run_apps` cannot hand the app its rules, so this does the same steps with
    extra keyword arguments, which os-ken's own apps ignore."""
    host, port = listen.rsplit(":", 1)
    cfg.CONF(args=["--ofp-listen-host", host, "--ofp-tcp-listen-port", port], project="os_ken")
    manager = AppManager.get_instance()
    manager.load_apps(["controller.southbound.openflow"])
    services = manager.instantiate_apps(**manager.create_contexts(), ina_tables=tables,
                                        ina_state=state, ina_version=version,
                                        ina_follow=follow)
    try:
        hub.joinall(services)
    finally:
        manager.close()


def write_state(path: Path, pushes: dict[str, list[float]], version: int = 1,
                versions: list[int] | None = None) -> None:
    """Atomically publish, per switch, how long each (re)install took, the newest plan version
    every connected switch confirmed (`version`, what the daemon waits for) and the versions
    the switches hold (readers poll the file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({
        "version": version, "versions": versions or [version],
        "switches": {s: {"pushes_seconds": p} for s, p in pushes.items()}}))
    os.replace(tmp, path)


def controller_command(topology: Path, plan: Path, listen: str, state: Path,
                       version: int = 1, follow_state: Path | None = None,
                       drain_seconds: float = 2.0) -> list[str]:
    follow = (["--follow-state", str(follow_state), "--drain-seconds", f"{drain_seconds:g}"]
              if follow_state else [])
    return [sys.executable, "-m", "controller.southbound.openflow", "--topology", str(topology),
            "--plan", str(plan), "--listen", listen, "--state", str(state),
            "--plan-version", str(version), *follow, "--log-level", "warning"]


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
                       workdir: Path, *, version: int = 1, timeout: float = 30.0,
                       follow_state: Path | None = None,
                       drain_seconds: float = 2.0) -> OvsSwitches:
    """Run the plain switches named in `switch_ports` (switch → {port: interface}, interfaces in
    the root namespace) as OVS bridges under a new OpenFlow controller; returns once all of
    them hold the plan. With `follow_state` (the daemon's state file) the controller follows
    the daemon's plan versions. Writes plan, state and log to `workdir`; `close()` undoes it
    all."""
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
    # Bridge names become interface names (at most 15 characters), unique per process and call.
    serial = next(_BRIDGE_SERIAL) % 100
    bridges = {s: f"ina{os.getpid() % 100000}-{serial}s{datapath_id(network, s)}"
               for s in switch_ports}
    command = controller_command(Path(network.source), plan_file, listen, state, version,
                                 follow_state, drain_seconds)
    ovs = OvsSwitches(bridges, command, state, (workdir / "openflow-controller.log").open("ab"))
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
    parser.add_argument("--state", type=Path,
                        help="JSON file: install times per switch, plan versions installed")
    parser.add_argument("--follow-state", type=Path, metavar="FILE",
                        help="the daemon's state file: follow its plan versions")
    parser.add_argument("--drain-seconds", type=float, default=2.0,
                        help="delete an old plan version this long after the hosts left it "
                             "(default %(default)s, the daemon's)")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        network = load_topology(args.topology)
        first = _first_version(args)
        follow = (Follow(network, args.follow_state, args.drain_seconds)
                  if args.follow_state else None)
        tables = compile_openflow(network.without_links(set(first.dead_links)), first.plan,
                                  first.version)
    except (OSError, TopologyError, PlanFormatError, CompileError) as exc:
        print(f"openflow controller: {exc}", file=sys.stderr)
        return 2
    serve(tables, args.listen, args.state, version=first.version, follow=follow)
    return 0


def _first_version(args: argparse.Namespace) -> Announced:
    """The plan to start with: `--plan`, or what the hosts follow if the daemon is further on
    (a restarted controller must not set the switches back to an old version)."""
    given = Announced(args.plan_version, load_plan(args.plan))
    if args.follow_state is None:
        return given
    try:
        published = _announced(json.loads(args.follow_state.read_text()))
    except UNREADABLE:
        return given
    return published if published.version > given.version else given


if __name__ == "__main__":
    sys.exit(main())
