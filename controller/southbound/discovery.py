"""Link liveness from probe packets through the switches' CPU port, as LLDP discovery does in
ONOS and Ryu, checked against the switches' own port counters.

Each round (`interval` seconds) the monitor

1. reads every switch's `port_packets` cells of the ports where monitored links end (frames
   received per port, p4src/README.md step 0): the *before* reading;
2. sends `probes_per_round` probes out of every switch port that the topology connects to
   another monitored switch (P4Runtime packet-out; an LLDP frame whose chassis id names the
   sender and whose port id names the sending port, and which names the round); the far end
   hands each to the controller (packet-in with its ingress port);
3. reads every switch again: a switch that answers has handled its stream, probes included,
   up to then (the *sender* reading);
4. next round, step 1's reading is the *after* reading of this one.

A round then says, for each directed link u -> v, one of three things (`LinkJudge`):

- *carried*: a probe arrived, or v's counter of that port grew between before and after
  (a congested link drops or delays probes but keeps delivering frames);
- *missed*: no probe and no new frame although u answered after its probes were handed over
  and v answered after that, and the data planes of both caught up with the round: a probe
  of this very round passed through each of them (sent or received) over another of its
  links. Whatever u sent had time to arrive and v's data plane to count it, and it counted
  nothing;
- *undecided*: u or v did not answer in time (a switch busy, starved of CPU, restarting or
  gone), u was not sent probes (not connected, not primary), v's counter went back (v
  restarted), or no probe of the round passed through u's or v's data plane over another
  link. A silent end is no evidence about the link.

Why the data planes' catching up: an answered read proves a switch's control plane alive,
not that its data plane has handled the frames that reached it. bmv2 has one ingress thread
behind one input queue; under load a probe can wait there for seconds while the switch
answers reads with a flat counter for that port (measured: on bmv2 under congestion the idle
L2-S0 died and came back after a real cut elsewhere). Frames leave that queue in arrival
order, so a probe of the same round that got through the switch shows that what was queued
before it got through too: the judged probe, sent at the same moment, up to its own transit
(which, on a loaded link, the counter covers). A switch whose only monitored link is the
judged one has no such witness: for it the answered read stays the evidence (the rule before
this one). A switch that loses all its monitored links at once shows no witness either; but
nothing of its data plane moves (no probe of any round through it, no counter growing),
which a lagging data plane does not look like: for such a still switch the answered read is
the evidence again, so its links die as any cut does.

A link dies after `dead_after` missed rounds in a row (undecided rounds neither count nor
break the run) and comes back after `revive_after` carried rounds in a row. Measured before
this rule (RELIABILITY.md section 6): under load an idle link, whose counter only probes
move, was declared dead three times in a 44-minute run, and a restarted switch left one of
its links dead: probes and flat counters were counted by the clock of the controller's
probe loop, so a sender or receiver that stalled for a second and a half looked like a cut
cable. A real cut is seen in at most (`dead_after` + 1) rounds: the round in which it
happens may still show frames from before it.

Only links between monitored switches are judged: a host or a plain OpenFlow switch sends no
probe back. A switch whose program has no `port_packets` counter is judged by probes alone,
its liveness taken from its P4Runtime channel. Switch failures (a lost P4Runtime channel)
are the daemon's business (controller/service/daemon.py): while a switch is away its links are
undecided, not dead.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from finsy import P4ClientError, P4CounterEntry, P4PacketOut, Switch

from controller.model.network import Network
from controller.southbound.cancelled import CallCancelled, call_cancelled_as_error
from dataplane.frame import ETHERTYPE_LLDP

LOG = logging.getLogger(__name__)
Edge = tuple[str, str]  # a directed link (u, v) of `Network.graph`

LLDP_MULTICAST = bytes.fromhex("0180c200000e")  # nearest bridge: never forwarded by bridges
_CHASSIS_ID, _PORT_ID, _TTL, _SYSTEM_DESCRIPTION = 1, 2, 3, 6
_ROUND_PREFIX = b"ina probe round "
_LOCALLY_ASSIGNED = 7  # chassis-id and port-id subtype
PORT_COUNTER = "port_packets"


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", kind << 9 | len(value)) + value


def probe_frame(switch: str, port: int, round_: int = 0, ttl: int = 120) -> bytes:
    """The LLDP probe that `switch` sends out of `port` in the monitor's round `round_`
    (named in the system description TLV)."""
    source = bytes([0x02, 0, 0, 0]) + port.to_bytes(2, "big")  # locally administered
    sub = bytes([_LOCALLY_ASSIGNED])
    return (
        LLDP_MULTICAST
        + source
        + ETHERTYPE_LLDP.to_bytes(2, "big")
        + _tlv(_CHASSIS_ID, sub + switch.encode())
        + _tlv(_PORT_ID, sub + str(port).encode())
        + _tlv(_TTL, ttl.to_bytes(2, "big"))
        + _tlv(_SYSTEM_DESCRIPTION, _ROUND_PREFIX + str(round_).encode())
        + _tlv(0, b"")
    )


def parse_probe(frame: bytes) -> tuple[str, int, int | None] | None:
    """(switch, port, round) named by a probe from `probe_frame` (round None if it names
    none); None for any other frame."""
    if frame[12:14] != ETHERTYPE_LLDP.to_bytes(2, "big"):
        return None
    fields: dict[int, bytes] = {}
    at = 14
    while at + 2 <= len(frame):
        (head,) = struct.unpack_from("!H", frame, at)
        kind, length = head >> 9, head & 0x1FF
        if kind == 0:
            break
        fields[kind] = frame[at + 2 : at + 2 + length]
        at += 2 + length
    chassis, port = fields.get(_CHASSIS_ID, b""), fields.get(_PORT_ID, b"")
    if chassis[:1] != bytes([_LOCALLY_ASSIGNED]) or port[:1] != bytes([_LOCALLY_ASSIGNED]):
        return None
    described = fields.get(_SYSTEM_DESCRIPTION, b"")
    try:
        round_ = (
            int(described[len(_ROUND_PREFIX) :]) if described.startswith(_ROUND_PREFIX) else None
        )
        return chassis[1:].decode(), int(port[1:].decode()), round_
    except (UnicodeDecodeError, ValueError):
        return None


Port = tuple[str, int]  # (switch, port)


@dataclass
class RoundEvidence:
    """What one round of the monitor saw (see the module docstring)."""

    sent: frozenset[str]  # switches whose probes were handed over
    senders_answered: frozenset[str]  # switches that answered after their probes were sent
    before: dict[Port, int]  # port_packets known before the probes were sent
    after: dict[Port, int]  # port_packets read a round later (switches that answered)
    receivers_answered: frozenset[str]  # switches that answered that later read
    arrived: frozenset[Edge]  # links whose probe (of any round) came back as a packet-in
    current: frozenset[Edge]  # links whose probe of this very round came back


class LinkJudge:
    """The decision rule without I/O: each round's evidence in, dead directed links out."""

    def __init__(
        self, far_end: dict[Edge, Port], *, dead_after: int = 2, revive_after: int = 1
    ) -> None:
        if dead_after < 1 or revive_after < 1:
            raise ValueError("dead_after and revive_after must be at least 1")
        self.far_end = far_end
        self.dead_after = dead_after
        self.revive_after = revive_after
        self.missed = dict.fromkeys(far_end, 0)  # missed rounds in a row
        self.carried = dict.fromkeys(far_end, 0)  # carried rounds in a row (revival of a dead one)
        self.dead: set[Edge] = set()
        # switch -> the directed links through it (as sender or receiver): the probes that
        # can show its data plane got past a round's sending (`caught_up`)
        self.through: dict[str, set[Edge]] = {}
        for edge in far_end:
            for switch in edge:
                self.through.setdefault(switch, set()).add(edge)
        self.rounds = 0
        # Link-rounds carried by counted frames alone while both ends answered: rounds probes
        # alone would have called missed (congestion), counted for the state file.
        self.saved_by_traffic = 0
        self.undecided = 0  # link-rounds without a verdict: an end silent or restarting

    def verdict(self, edge: Edge, seen: RoundEvidence) -> str:
        """'carried', 'missed' or 'undecided' for `edge` in the round `seen`."""
        sender, receiver = edge
        port = self.far_end[edge]
        if sender not in seen.sent:
            return "undecided"
        if edge in seen.arrived:
            return "carried"
        before, after = seen.before.get(port), seen.after.get(port)
        if before is not None and after is not None:
            if after > before:
                return "carried"
            if after < before:  # the receiver restarted and counts from 0: no comparison
                return "undecided"
        if (
            sender in seen.senders_answered
            and receiver in seen.receivers_answered
            and self.caught_up(sender, edge, seen)
            and self.caught_up(receiver, edge, seen)
        ):
            return "missed"
        return "undecided"

    def caught_up(self, switch: str, edge: Edge, seen: RoundEvidence) -> bool:
        """Did `switch`'s data plane handle frames of this round, i.e. get past the probes'
        sending? Yes when a probe of this round passed through it over another link than
        `edge`'s (sent by it, or received by it): its ingress is one queue in arrival order
        (bmv2: one ingress thread behind an input buffer), so what was queued before, the
        judged link's probe sent at the same time included, was handled too. An answered read
        proves only its control plane alive. A switch with no other monitored link, or whose
        data plane is still (`still`), falls back to that answer."""
        others = self.through[switch] - {edge, edge[::-1]}
        return not others or not others.isdisjoint(seen.current) or self.still(switch, seen)

    def still(self, switch: str, seen: RoundEvidence) -> bool:
        """Nothing of `switch`'s data plane moved this round: no probe of any round went
        through any of its links and no counter of its monitored ports grew (all read). A
        lagging data plane still moves (it lets out earlier rounds' probes, counts what it
        works through); a switch cut off on every link, or whose ingress is wedged, does not,
        and for it the answered read is the evidence, so its links die as any cut does."""
        if not self.through[switch].isdisjoint(seen.arrived):
            return False
        ports = [self.far_end[e] for e in self.through[switch] if e[1] == switch]
        return all(
            seen.before.get(p) is not None and seen.after.get(p) == seen.before[p] for p in ports
        )

    def judge(self, seen: RoundEvidence) -> set[Edge]:
        """Take one round's evidence; the links whose state changed."""
        self.rounds += 1
        changed = set()
        for edge in self.far_end:
            verdict = self.verdict(edge, seen)
            if verdict == "undecided":
                self.undecided += 1
                continue
            if verdict == "missed":
                self.missed[edge] += 1
                self.carried[edge] = 0
                if edge not in self.dead and self.missed[edge] >= self.dead_after:
                    self.dead.add(edge)
                    changed.add(edge)
                continue
            if (
                edge not in seen.arrived
                and edge[0] in seen.senders_answered
                and edge[1] in seen.receivers_answered
            ):
                self.saved_by_traffic += 1
            self.missed[edge] = 0
            if edge in self.dead:
                self.carried[edge] += 1
                if self.carried[edge] >= self.revive_after:
                    self.dead.discard(edge)
                    self.carried[edge] = 0
                    changed.add(edge)
        return changed


class LinkMonitor:
    """Probes the links between `switches` (finsy Switches named as in `network`) in rounds
    and judges them with `LinkJudge`. `changed` is set (and `on_change(dead_links)` called)
    whenever the set of dead links changes; the caller clears the event after reading
    `dead_links()`."""

    def __init__(
        self,
        switches: Iterable[Switch],
        network: Network,
        *,
        interval: float = 0.5,
        dead_after: int = 2,
        revive_after: int = 1,
        probes_per_round: int = 3,
        settle: float = 0.05,
        on_change: Callable[[frozenset[Edge]], None] | None = None,
        on_heard: Callable[[str], None] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self.switches = {sw.name: sw for sw in switches}
        self.interval = interval
        # Three probes a round: on an idle link (only probes move its counter) random loss p
        # fakes a cut with p^(3·dead_after) (with one probe and three rounds, 5 % loss on every
        # link of ARO Fig. 1 re-planned twice in 3 iterations).
        self.probes_per_round = probes_per_round
        self.settle = settle  # between the probes and the sender reading: the frames' transit
        # A switch slower than this to answer a read (or take its probes) leaves the round
        # undecided for its links. Two rounds: a loaded switch that answers in 0.6 s must
        # still let a cut be judged, only later.
        self.answer_within = 2 * interval
        self.on_change = on_change
        # Called with a switch's name on each of its packet-ins: its process forwards frames and
        # talks on its stream, a sign of life when its reads go unanswered (busy, not hung).
        self.on_heard = on_heard
        self.changed = asyncio.Event()
        # (sender, its port, receiver, its port) -> the topology's directed link.
        self.expected: dict[tuple[str, int, str, int], Edge] = {
            (u, d["out_port"], v, d["in_port"]): (u, v)
            for u, v, d in network.graph.edges(data=True)
            if u in self.switches and v in self.switches
        }
        self.judge = LinkJudge(
            {edge: (v, vp) for (_, _, v, vp), edge in self.expected.items()},
            dead_after=dead_after,
            revive_after=revive_after,
        )
        self.ports: dict[str, list[int]] = {}  # switch -> its ports where monitored links end
        for switch, port in sorted(self.judge.far_end.values()):
            self.ports.setdefault(switch, []).append(port)
        self.known: dict[Port, int] = {}  # last port_packets reading of each port
        self.uncounted: set[str] = set()  # switches whose counter cannot be read
        self._arrived: set[Edge] = set()
        self._current: set[Edge] = set()  # links whose probe of round `self._round` arrived
        self._round = 0
        self._writes: dict[str, asyncio.Task] = {}  # each sender's last probe write
        self._strays: set[tuple[str, int, str, int]] = set()

    def stats(self) -> dict:
        """For the state file: the probe interval, rounds judged, link-rounds kept alive by
        counters alone, link-rounds undecided (an end silent)."""
        return {
            "interval_seconds": self.interval,
            "rounds": self.judge.rounds,
            "saved_by_traffic": self.judge.saved_by_traffic,
            "undecided": self.judge.undecided,
        }

    def dead_links(self) -> frozenset[Edge]:
        return frozenset(self.judge.dead)

    def alive_links(self) -> frozenset[Edge]:
        return frozenset(self.judge.far_end) - self.judge.dead

    async def run(self) -> None:
        """Probe, listen and judge until cancelled."""
        async with asyncio.TaskGroup() as group:
            for sw in self.switches.values():
                group.create_task(self._listen(sw))
            group.create_task(self._rounds())

    async def _listen(self, sw: Switch) -> None:
        async for packet in sw.read_packets(eth_types={ETHERTYPE_LLDP}):
            self.arrived(sw.name, packet["ingress_port"], packet.payload)

    def arrived(self, switch: str, port: int, frame: bytes) -> None:
        """A packet-in of `frame` at (`switch`, `port`)."""
        if self.on_heard is not None:
            self.on_heard(switch)
        probe = parse_probe(frame)
        if probe is None:
            return
        sender, sender_port, round_ = probe
        key = (sender, sender_port, switch, port)
        edge = self.expected.get(key)
        if edge is not None:
            self._arrived.add(edge)
            if round_ == self._round:
                self._current.add(edge)
        elif key not in self._strays:  # a cable the topology does not describe
            self._strays.add(key)
            LOG.warning(
                "probe from %s port %d arrived at %s port %d: not a link of the topology", *key
            )

    async def _rounds(self) -> None:
        """Rounds until cancelled. A round that fails is no evidence and the next one
        starts afresh: the monitor must outlive any one switch's trouble."""
        loop = asyncio.get_running_loop()
        pending: tuple | None = None
        while True:
            started = loop.time()
            try:
                with call_cancelled_as_error():
                    pending = await self._one_round(pending)
            except Exception:  # logged: a dead monitor would hide every cut
                LOG.exception("link monitor round %d failed; it proves nothing", self._round)
                pending = None
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - started)))

    async def _one_round(self, pending: tuple | None) -> tuple:
        """Judge the previous round (`pending`, with this round's first reading as its
        *after*), send this round's probes; this round's evidence so far."""
        answered = await self._read_all()
        if pending is not None:
            sent, senders, before, arrived, current = pending
            self.decide(
                RoundEvidence(
                    sent,
                    senders,
                    before,
                    dict(self.known),
                    answered,
                    frozenset(arrived),
                    frozenset(current),
                )
            )
        before = dict(self.known)
        arrived = self._arrived = set()
        current = self._current = set()
        self._round += 1
        sent = await self._send_probes()
        await asyncio.sleep(self.settle)
        senders = await self._read_all()
        return sent, senders, before, arrived, current

    def decide(self, seen: RoundEvidence) -> None:
        """Judge one round and report a change of the dead links."""
        changed = self.judge.judge(seen)
        if not changed:
            return
        for edge in sorted(changed):
            port = self.judge.far_end[edge]
            if edge in self.judge.dead:
                LOG.warning(
                    "link %s -> %s dead: %d rounds in a row without a probe or a new "
                    "frame at %s port %d (%s), both ends answering",
                    *edge,
                    self.judge.missed[edge],
                    *port,
                    seen.after.get(port, "not counted"),
                )
            else:
                LOG.warning("link %s -> %s alive again", *edge)
        dead = self.dead_links()
        self.changed.set()
        if self.on_change is not None:
            self.on_change(dead)

    async def _read_all(self) -> frozenset[str]:
        """Read every switch's monitored port counters at once; the switches that answered
        within a round (a switch without the counter answers by being connected)."""
        names = list(self.switches)
        answers = await asyncio.gather(*(self._read(self.switches[n]) for n in names))
        return frozenset(n for n, ok in zip(names, answers, strict=True) if ok)

    async def _read(self, sw: Switch) -> bool:
        if not sw.is_up:
            return False
        if sw.name in self.uncounted or sw.name not in self.ports:
            return True
        counts = {}
        try:
            async with asyncio.timeout(self.answer_within):
                with call_cancelled_as_error():
                    # finsy types read() as a coroutine; it is an async generator
                    async for entry in sw.read(
                        [  # type: ignore[attr-defined]
                            P4CounterEntry(PORT_COUNTER, index=p) for p in self.ports[sw.name]
                        ]
                    ):
                        counts[entry.index] = entry.data.packet_count if entry.data else 0
        except (TimeoutError, P4ClientError, CallCancelled):
            return False  # no answer now (a busy or restarting switch): no evidence
        except Exception as exc:  # no such counter: probes decide
            if sw.is_up:
                LOG.warning(
                    "%s: counter %s cannot be read (%s): its links are judged by probes alone",
                    sw.name,
                    PORT_COUNTER,
                    exc,
                )
                self.uncounted.add(sw.name)
                for port in self.ports[sw.name]:
                    self.known.pop((sw.name, port), None)
            return False
        for port, packets in counts.items():
            self.known[(sw.name, port)] = packets
        return True

    async def _send_probes(self) -> frozenset[str]:
        """Hand every sender its probes (one write per switch, all at once); the switches
        that took them within the round. A write is never cancelled: cancelling a write on
        the P4Runtime stream cancels the stream itself (grpc.aio), i.e. drops the switch's
        channel; a sender whose last write is still pending gets none this round."""
        out: dict[str, list[P4PacketOut]] = {}
        for sender, port, _, _ in self.expected:
            out.setdefault(sender, []).extend(
                [P4PacketOut(probe_frame(sender, port, self._round), egress_port=port)]
                * self.probes_per_round
            )
        writes = {}
        for name, probes in out.items():
            sw = self.switches[name]
            pending = self._writes.get(name)
            if not (sw.is_up and sw.is_primary) or (pending is not None and not pending.done()):
                continue
            writes[name] = self._writes[name] = asyncio.create_task(self._write(sw, probes))
        if writes:
            await asyncio.wait(writes.values(), timeout=self.answer_within)
        return frozenset(n for n, task in writes.items() if task.done() and task.result())

    @staticmethod
    async def _write(sw: Switch, probes: list[P4PacketOut]) -> bool:
        try:
            with call_cancelled_as_error():
                await sw.write(probes)
        except Exception as exc:  # a dropping connection: the round is undecided
            LOG.debug("probes from %s not sent: %s", sw.name, exc)
            return False
        return True
