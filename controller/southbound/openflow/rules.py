"""A plan compiled into the OpenFlow 1.3 rules of the plain (INA-agnostic) switches.

A plain switch cannot parse the INA header, but every INA packet carries its flow id in the UDP
source port (p4src/README.md), and flow ids are unique across a plan, so the switch can still
realise exactly the planned paths: one rule per flow leaving it, and a group of type ALL per
task replicating the result flow down the result tree. The decisions themselves (flow ids, next
hops, result trees, host routes) come from `controller.compiler.program`, so OVS and the P4 switches
install the same plan. Two tables:

* table 0, INA traffic (UDP destination port INA_UDP_PORT): CONTROL packets (ECN CE; they keep
  the data packet's source port but travel back to its sender) go to table 1; a known flow
  goes out of its planned port, or to its result group; an unknown flow is dropped, as the P4
  pipeline drops a miss in `ina_forward`; everything else goes to table 1;
* table 1, IPv4: a /32 route per host, as `ipv4_lpm`; a miss (ARP, IPv6, ...) is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.compiler.program import (
    Numbering,
    built_network,
    flow_routes,
    host_routes,
    number_tasks,
    result_children,
)
from controller.model.network import Network
from controller.model.plan import Plan
from dataplane.frame import ECN_CE, ETHERTYPE_IPV4, INA_UDP_PORT, PROTO_UDP

TABLE_INA, TABLE_IPV4 = 0, 1
PRIO_CONTROL, PRIO_FLOW, PRIO_UNKNOWN_FLOW, PRIO_HOST, PRIO_MISS = 300, 200, 100, 100, 0


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
        return {
            int(r.match["udp_src"]): r.output
            for r in self.flows
            if r.priority == PRIO_FLOW and r.output is not None
        }

    def result_ports(self) -> dict[int, tuple[int, ...]]:
        """Result flow id → ports its group replicates to."""
        groups = {g.group_id: g.ports for g in self.groups}
        return {int(r.match["udp_src"]): groups[r.group] for r in self.flows if r.group is not None}


def datapath_id(network: Network, switch: str) -> int:
    """The runner's device id of the switch, so that one number names it on either target."""
    return network.switches.index(switch) + 1


def by_dpid(tables: dict[str, SwitchTables]) -> dict[int, SwitchTables]:
    """The same tables, keyed by datapath id (what a connecting switch tells the app)."""
    return {t.datapath_id: t for t in tables.values()}


def _ina(**extra: int) -> dict[str, int | str]:
    return {"eth_type": ETHERTYPE_IPV4, "ip_proto": PROTO_UDP, "udp_dst": INA_UDP_PORT, **extra}


def compile_openflow(network: Network, plan: Plan, version: int = 1) -> dict[str, SwitchTables]:
    """The OpenFlow rules of every plain switch for `plan` as plan `version`; raises
    CompileError where `controller.compiler.program` would."""
    network = built_network(network, plan)
    ids = Numbering(network)
    tables = {
        s: SwitchTables(s, datapath_id(network, s))
        for s in network.switches
        if not network.is_ina(s)
    }
    for switch, t in tables.items():
        t.flows += [
            FlowRule(TABLE_INA, PRIO_CONTROL, _ina(ip_ecn=ECN_CE), goto_table=TABLE_IPV4),
            FlowRule(TABLE_INA, PRIO_UNKNOWN_FLOW, _ina()),
            FlowRule(TABLE_INA, PRIO_MISS, {}, goto_table=TABLE_IPV4),
            *(
                FlowRule(
                    TABLE_IPV4, PRIO_HOST, {"eth_type": ETHERTYPE_IPV4, "ipv4_dst": ip}, output=port
                )
                for ip, port in host_routes(network, ids, switch).items()
            ),
            FlowRule(TABLE_IPV4, PRIO_MISS, {}),
        ]
    for task in number_tasks(network, plan, version):
        for (switch, flow_id), port in flow_routes(network, task).items():
            if switch in tables:
                tables[switch].flows.append(
                    FlowRule(TABLE_INA, PRIO_FLOW, _ina(udp_src=flow_id), output=port)
                )
        for switch, ports in result_children(network, task).items():
            if switch in tables:
                # The result flow id is unique across the plan, so it can name the group too.
                tables[switch].groups.append(GroupRule(task.result_flow, tuple(ports)))
                tables[switch].flows.append(
                    FlowRule(
                        TABLE_INA, PRIO_FLOW, _ina(udp_src=task.result_flow), group=task.result_flow
                    )
                )
    return tables
