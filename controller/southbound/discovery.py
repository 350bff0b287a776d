"""Link liveness from probe packets through the switches' CPU port, as LLDP discovery does in
ONOS and Ryu.

Every `interval` seconds a probe (two: `probes_per_round`), an LLDP frame whose chassis id
names the sending switch and whose port id names the sending port, leaves each switch port that
the topology connects to another monitored switch (P4Runtime packet-out). The switch at the far end hands it to the
controller (packet-in with its ingress port, p4src/README.md step 0), which proves that the
directed link sender → receiver carries frames. A link whose probes have not arrived for
`dead_after` consecutive rounds is dead; the next probe that arrives makes it alive again.

A congested link is not a dead one: its queues delay or drop probes like any other frame (on
ARO Fig. 1 with every link at 30 % of the workers' pace, probes alone declared busy links
dead and 4 iterations went through 22 plan versions). So each round the monitor also reads the
receiving switch's `port_packets` counter (frames received per port, p4src/README.md step 0):
a link whose far end received frames since the last reading carried them, probe or not. A
link dies only when no probe came for `dead_after` rounds and its far end has answered
`dead_after` counter reads in a row without a new frame (a cut cable, a failed port): a switch
too loaded to answer in time delays the verdict, it does not make one up. A switch whose
program has no such counter, or that never answered a read yet, is judged by probes alone.

Only links between monitored switches are judged: a host or a plain OpenFlow switch sends no
probe back. At start-up every link is presumed alive until it has missed `dead_after` rounds,
so a freshly started controller does not report the whole network dead.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterable

from finsy import P4ClientError, P4CounterEntry, P4PacketOut, Switch

from controller.network import Network

LOG = logging.getLogger(__name__)
Edge = tuple[str, str]  # a directed link (u, v) of `Network.graph`

ETHERTYPE_LLDP = 0x88CC
LLDP_MULTICAST = bytes.fromhex("0180c200000e")  # nearest bridge: never forwarded by bridges
_CHASSIS_ID, _PORT_ID, _TTL = 1, 2, 3
_LOCALLY_ASSIGNED = 7  # chassis-id and port-id subtype
PORT_COUNTER = "port_packets"


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", kind << 9 | len(value)) + value


def probe_frame(switch: str, port: int, ttl: int = 120) -> bytes:
    """The LLDP probe that `switch` sends out of `port`."""
    source = bytes([0x02, 0, 0, 0]) + port.to_bytes(2, "big")  # locally administered
    sub = bytes([_LOCALLY_ASSIGNED])
    return (LLDP_MULTICAST + source + ETHERTYPE_LLDP.to_bytes(2, "big")
            + _tlv(_CHASSIS_ID, sub + switch.encode())
            + _tlv(_PORT_ID, sub + str(port).encode())
            + _tlv(_TTL, ttl.to_bytes(2, "big")) + _tlv(0, b""))


def parse_probe(frame: bytes) -> tuple[str, int] | None:
    """(switch, port) named by a probe from `probe_frame`; None for any other frame."""
    if frame[12:14] != ETHERTYPE_LLDP.to_bytes(2, "big"):
        return None
    fields: dict[int, bytes] = {}
    at = 14
    while at + 2 <= len(frame):
        (head,) = struct.unpack_from("!H", frame, at)
        kind, length = head >> 9, head & 0x1FF
        if kind == 0:
            break
        fields[kind] = frame[at + 2:at + 2 + length]
        at += 2 + length
    chassis, port = fields.get(_CHASSIS_ID, b""), fields.get(_PORT_ID, b"")
    if chassis[:1] != bytes([_LOCALLY_ASSIGNED]) or port[:1] != bytes([_LOCALLY_ASSIGNED]):
        return None
    try:
        return chassis[1:].decode(), int(port[1:].decode())
    except (UnicodeDecodeError, ValueError):
        return None


class LinkMonitor:
    """Probes the links between `switches` (finsy Switches named as in `network`).

    A link dies after `dead_after` rounds without its probe and comes back once its probes
    arrived in `revive_after` rounds in a row: probes lost to congestion otherwise make a busy
    link flap, and every flap is a re-plan. `changed` is set (and `on_change(dead_links)`
    called) whenever the set of dead links changes; the caller clears the event after reading
    `dead_links()`.
    """

    def __init__(self, switches: Iterable[Switch], network: Network, *, interval: float = 1.0,
                 dead_after: int = 3, revive_after: int = 1, probes_per_round: int = 2,
                 on_change: Callable[[frozenset[Edge]], None] | None = None) -> None:
        if dead_after < 1 or revive_after < 1 or interval <= 0:
            raise ValueError("interval must be > 0, dead_after and revive_after >= 1")
        self.switches = {sw.name: sw for sw in switches}
        self.interval = interval
        self.dead_after = dead_after
        self.revive_after = revive_after
        # Two probes a round: on an idle link (nothing but probes moves its counter) random
        # loss of p then fakes a cut with p^(2·dead_after), not p^dead_after (with one probe,
        # 5 % loss on every link of ARO Fig. 1 re-planned twice in 3 iterations).
        self.probes_per_round = probes_per_round
        self.on_change = on_change
        self.changed = asyncio.Event()
        # (sender, its port, receiver, its port) -> the topology's directed link.
        self.expected: dict[tuple[str, int, str, int], Edge] = {
            (u, d["out_port"], v, d["in_port"]): (u, v)
            for u, v, d in network.graph.edges(data=True)
            if u in self.switches and v in self.switches
        }
        # (receiver, its port) -> the link that ends there: whose traffic its counter counts.
        self.ending_at: dict[tuple[str, int], Edge] = {
            (v, vp): edge for (_, _, v, vp), edge in self.expected.items()}
        self.far_end = {edge: end for end, edge in self.ending_at.items()}
        self.received: dict[tuple[str, int], int] = {}  # last `port_packets` reading
        self.flat: dict[tuple[str, int], int] = {}  # answered reads in a row without growth
        self.uncounted: set[str] = set()  # switches whose counter cannot be read
        self.round = 0
        self.last_seen: dict[Edge, int] = {}  # last round with a probe or traffic
        self.last_probe: dict[Edge, int] = {}
        # Link-rounds in which probes alone would have judged a link dead but its counter
        # showed traffic: how often congestion would have caused a re-plan.
        self.saved_by_traffic = 0
        self.streak_start: dict[Edge, int] = {}  # first round of the current run of probes
        self._dead: frozenset[Edge] = frozenset()
        self._strays: set[tuple[str, int, str, int]] = set()

    def alive_links(self) -> frozenset[Edge]:
        """Links whose probe arrived within the last `dead_after` rounds."""
        return frozenset(e for e, seen in self.last_seen.items()
                         if self.round - seen < self.dead_after)

    def dead_links(self) -> frozenset[Edge]:
        return self._dead

    async def run(self) -> None:
        """Probe and listen until cancelled."""
        async with asyncio.TaskGroup() as group:
            for sw in self.switches.values():
                group.create_task(self._listen(sw))
            ports: dict[str, list[int]] = {}
            for switch, port in sorted(self.ending_at):
                ports.setdefault(switch, []).append(port)
            for switch, its_ports in ports.items():
                group.create_task(self._read_counters(self.switches[switch], its_ports))
            group.create_task(self._probe())

    async def _listen(self, sw: Switch) -> None:
        async for packet in sw.read_packets(eth_types={ETHERTYPE_LLDP}):
            self.arrived(sw.name, packet["ingress_port"], packet.payload)

    def arrived(self, switch: str, port: int, frame: bytes) -> None:
        """A packet-in of `frame` at (`switch`, `port`)."""
        sender = parse_probe(frame)
        if sender is None:
            return
        key = (*sender, switch, port)
        edge = self.expected.get(key)
        if edge is not None:
            self.last_probe[edge] = self.round
            self._seen(edge)
        elif key not in self._strays:  # a cable the topology does not describe
            self._strays.add(key)
            LOG.warning("probe from %s port %d arrived at %s port %d: not a link of the "
                        "topology", *key)

    def counted(self, switch: str, port: int, packets: int) -> None:
        """A reading of `switch`'s `port_packets[port]`: growth since the last reading proves
        that the link ending there carried frames (a restarted switch counts from 0 again)."""
        key = (switch, port)
        edge = self.ending_at.get(key)
        before = self.received.get(key)
        self.received[key] = packets
        if edge is None:
            return
        if before is None or packets <= before:
            self.flat[key] = self.flat.get(key, 0) + 1
            self._judge()
            return
        self.flat[key] = 0
        if self.round - self.last_probe.get(edge, 0) >= self.dead_after:
            self.saved_by_traffic += 1
        self._seen(edge)

    def _seen(self, edge: Edge) -> None:
        if self.last_seen.get(edge, -1) < self.round - 1:
            self.streak_start[edge] = self.round
        self.last_seen[edge] = self.round
        self._judge()

    async def _read_counters(self, sw: Switch, ports: list[int]) -> None:
        """Read `sw`'s `port_packets` cells of the monitored ports once a round, for as long
        as each answer takes: a slow answer is late evidence, not missing evidence."""
        while True:
            started = asyncio.get_running_loop().time()
            if sw.is_up:
                try:
                    async with asyncio.timeout(self.dead_after * self.interval * 4):
                        async for entry in sw.read([P4CounterEntry(PORT_COUNTER, index=p)
                                                    for p in ports]):
                            self.counted(sw.name, entry.index,
                                         entry.data.packet_count if entry.data else 0)
                except (TimeoutError, P4ClientError):
                    pass  # no answer now (a busy or restarting switch): no evidence
                except Exception as exc:  # noqa: BLE001 (no such counter: probes decide)
                    if sw.name not in self.uncounted and sw.is_up:
                        LOG.warning("%s: counter %s cannot be read (%s): its links are "
                                    "judged by probes alone", sw.name, PORT_COUNTER, exc)
                        self.uncounted.add(sw.name)
                        return
            elapsed = asyncio.get_running_loop().time() - started
            await asyncio.sleep(max(0.0, self.interval - elapsed))

    async def _probe(self) -> None:
        while True:
            self.round += 1
            for sender, port, _, _ in self.expected:
                sw = self.switches[sender]
                if not (sw.is_up and sw.is_primary):
                    continue  # its links will age out: nothing can be sent through it
                try:
                    await sw.write([P4PacketOut(probe_frame(sender, port), egress_port=port)]
                                   * self.probes_per_round)
                except Exception as exc:  # noqa: BLE001 (a dropping connection: the link ages out)
                    LOG.debug("probe from %s port %d not sent: %s", sender, port, exc)
            await asyncio.sleep(self.interval)
            self._judge()

    def _is_dead(self, edge: Edge) -> bool:
        if self.round - self.last_seen.get(edge, 0) >= self.dead_after:
            return self._counter_agrees(edge)
        return (edge in self._dead
                and self.round - self.streak_start[edge] + 1 < self.revive_after)

    def _counter_agrees(self, edge: Edge) -> bool:
        """The far end's counter, if it can be read, also says nothing arrived lately."""
        end = self.far_end[edge]
        if end[0] in self.uncounted or end not in self.received:
            return True
        return self.flat.get(end, 0) >= self.dead_after

    def _judge(self) -> None:
        dead = frozenset(e for e in self.expected.values() if self._is_dead(e))
        if dead != self._dead:
            LOG.info("dead links now: %s", sorted(dead) or "none")
            self._dead = dead
            self.changed.set()
            if self.on_change is not None:
                self.on_change(dead)
