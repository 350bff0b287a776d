"""Loss, duplication and reordering on every link of an emulation, with nftables.

`tc netem` is what one would use, but this kernel is built without it (CONFIG_NET_SCH_NETEM
unset, no cls_matchall or act_gact either; RELIABILITY.md). nf_tables is there, so each link
interface gets a netdev-family **egress** chain (egress, not ingress: a switch's packet socket
sees a frame before the ingress hook runs, so a frame dropped at ingress would still be
received):

- loss P %: `numgen random mod 10000 < 100·P drop`;
- duplication P %: `dup to` the same interface, the copy marked so it is not copied again;
- reordering P %: `fwd to` a veth pair whose far end `controller.emulation.faults.delayline` reads,
  holds `delay_ms` and sends out of the link interface again, marked so the hook lets it pass:
  the frames sent meanwhile overtake it.

Both ends of every link are impaired (hosts in their namespaces too). Each chain counts the
frames it saw and the ones it dropped, copied or diverted; `measured()` sets those against the
interfaces' own counters (what the far end really received), so the rate a run reports is the
one that happened.

The chains hook devices by name, and this kernel (6.18) re-attaches a netdev chain to any new
device of that name: a table that outlives its run (a run killed before `close`) impairs every
later emulation's `s1-eth1`, ... too. Measured: a table left by an interrupted 5 % loss run
turned one unimpaired 0.1 MB iteration on ARO Fig. 1 from 3.6 s with 0 resends into 45-131 s
with 3000-6500, and failed CI. So `close` deletes the root namespace's table without the
Mininet node's shell (which may be gone), and every emulation first removes what an earlier
run left (`remove_leftover_tables`), as `mn -c` removes leftover links.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import networkx as nx

from controller.emulation.faults.delayline import PASS_MARK
from dataplane import qdisc
from dataplane.frame import (
    ACK,
    BMV2_QUEUE_DEPTH,
    CONGESTED,
    DATA,
    INA_UDP_PORT,
    OFF_INA,
    OFF_UDP,
    PROBE,
    RESULT,
)

KINDS = ("loss", "duplicate", "reorder")
TABLE_PREFIX = "ina_faults_"
DUP_MARK = 0x2
# What a dropped frame was, by its INA flags: contributions (and the partial sums switches
# send on) go towards the PS, results away from it; CONTROL and non-INA frames are "other".
LOST_KINDS = ("contributions", "results", "acks_probes", "other")
KIND_OF_FLAGS = {DATA: "contributions", RESULT: "results", ACK: "acks_probes", PROBE: "acks_probes"}


class ImpairError(RuntimeError):
    """nft is missing or refused a rule; the message says which."""


@dataclass(frozen=True)
class Impairment:
    kind: str  # one of KINDS
    percent: float
    delay_ms: float = 20.0  # reorder: how long a diverted frame is held back

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"impairment kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if not 0 <= self.percent <= 100:
            raise ValueError(f"impairment percent must be in 0..100, got {self.percent}")

    def label(self) -> str:
        return f"{self.kind} {self.percent:g} %"


def _chain(interface: str) -> str:
    return "eg_" + interface.replace("-", "_")


def _lost_chain(interface: str) -> str:
    return "ls_" + interface.replace("-", "_")


def _lost_rules(interface: str) -> str:
    """A regular chain the loss rule jumps to: the frame is dropped by the rule of its kind,
    whose counter says what was lost (`LOST_KINDS`, in order; raw link-layer offsets of
    dataplane/frame.py); a frame's kind with or without the congestion mark."""
    port = f"@ll,{8 * (OFF_UDP + 2)},16 != {INA_UDP_PORT}"
    flags = f"@ll,{8 * (OFF_INA + 3)},8"
    by_kind = {k: [f for f, kind in KIND_OF_FLAGS.items() if kind == k] for k in LOST_KINDS}
    rules = [f"{port} counter drop"]  # not INA: counted with "other" below
    for kind in LOST_KINDS[:-1]:
        values = ", ".join(str(v) for f in by_kind[kind] for v in (f, f | CONGESTED))
        rules.append(f"{flags} {{ {values} }} counter drop")
    rules.append("counter drop")
    return f"chain {_lost_chain(interface)} {{ " + "; ".join(rules) + "; }"


@dataclass
class _Site:
    """One namespace (a host, or the root namespace of all the switches): its interfaces."""

    node: Any  # a Mininet node (untyped) whose cmd()/popen() run in that namespace
    interfaces: list[str]
    diverts: dict[str, str] = field(default_factory=dict)  # link interface -> divert veth end
    delayline: subprocess.Popen | None = None


class LinkImpairments:
    """Impairs every link interface of `emu` (a mininet_runner.Emulation) while entered."""

    def __init__(self, emu, impairment: Impairment) -> None:
        self.emu, self.impairment = emu, impairment
        self.tag = uuid.uuid4().hex[:6]  # root-namespace names must not meet another run's
        self.table = f"{TABLE_PREFIX}{self.tag}"
        self.sites: list[_Site] = []
        self.delayline_stats: dict[str, dict[str, int]] = {}
        self.unread: list[str] = []  # interfaces whose counters `counters` could not read
        root_interfaces: list[str] = []
        root_node = None
        for node in emu.node.values():
            names = [i.name for i in node.intfList() if i.name != "lo" and i.link is not None]
            if node.inNamespace:
                self.sites.append(_Site(node, names))
            else:
                root_interfaces += names
                root_node = root_node or node
        if root_node is not None:
            self.sites.append(_Site(root_node, root_interfaces))

    def __enter__(self) -> Self:
        if not _nft_available():
            raise ImpairError("nft is not installed (apt-get install nftables)")
        try:
            for index, site in enumerate(self.sites):
                self._install(site, index)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _install(self, site: _Site, index: int) -> None:
        imp = self.impairment
        threshold = round(imp.percent * 100)
        chains = []
        for n, interface in enumerate(site.interfaces):
            if imp.kind == "loss":
                action = f"counter goto {_lost_chain(interface)}"
                chains.append(_lost_rules(interface))
            elif imp.kind == "duplicate":
                action = f'meta mark set {DUP_MARK} counter dup to "{interface}" meta mark set 0'
            else:
                divert = f"rq{self.tag}{index:x}{n:x}"[:15]
                site.diverts[interface] = divert
                _cmd(site.node, f"ip link add {divert}a type veth peer name {divert}b")
                for end in ("a", "b"):
                    _cmd(site.node, f"sysctl -qw net.ipv6.conf.{divert}{end}.disable_ipv6=1")
                    _cmd(site.node, f"ip link set {divert}{end} up")
                action = f'counter fwd to "{divert}a"'
            chains.append(
                f'chain {_chain(interface)} {{ type filter hook egress device "{interface}" '
                f"priority 0; meta mark {{ {PASS_MARK}, {DUP_MARK} }} accept; counter; "
                f"numgen random mod 10000 < {threshold} {action}; }}"
            )
        rules = Path(self.emu.workdir) / f"{self.table}-{index}.nft"
        rules.write_text(f"table netdev {self.table} {{\n" + "\n".join(chains) + "\n}\n")
        _cmd(site.node, f"nft -f {rules}")
        if site.diverts:
            pairs = [f"{divert}b:{link}" for link, divert in site.diverts.items()]
            delayline = site.delayline = site.node.popen(
                [
                    sys.executable,
                    "-m",
                    "controller.emulation.faults.delayline",
                    "--delay-ms",
                    str(imp.delay_ms),
                    *pairs,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
            )
            line = delayline.stdout.readline()
            if not line.startswith(b'{"ready"'):
                raise ImpairError(
                    f"delay line did not start: {line.decode()}"
                    f"{delayline.stdout.read().decode()[-400:]}"
                )

    def counters(self) -> dict[str, dict[str, Any]]:
        """Per link interface: frames the egress chain saw (`seen`) and acted on (`hit`);
        under loss also what it dropped by `LOST_KINDS` (`lost`)."""
        out: dict[str, dict[str, Any]] = {}
        self.unread = []
        for site in self.sites:
            for _ in range(3):  # a listing garbled on a loaded machine is read again
                text = site.node.cmd(f"nft -j list table netdev {self.table}")
                try:
                    rules = [e["rule"] for e in json.loads(text)["nftables"] if "rule" in e]
                    break
                except (ValueError, KeyError):
                    continue
            else:
                self.unread += site.interfaces  # counted as unread, not as zero
                continue
            by_chain: dict[str, list[int]] = {}
            for rule in rules:
                for expr in rule["expr"]:
                    if "counter" in expr:
                        by_chain.setdefault(rule["chain"], []).append(expr["counter"]["packets"])
            for interface in site.interfaces:
                seen, hit = by_chain.get(_chain(interface), [0, 0])[:2]
                out[interface] = {"seen": seen, "hit": hit}
                lost = by_chain.get(_lost_chain(interface))
                if lost:  # non-INA first, then LOST_KINDS in order ("other" last)
                    counts = dict(zip(LOST_KINDS, lost[1:], strict=True))
                    counts["other"] += lost[0]
                    out[interface]["lost"] = counts
        return out

    def close(self) -> None:
        for site in self.sites:
            if site.delayline is not None and site.delayline.poll() is None:
                site.delayline.terminate()
                try:
                    out, _ = site.delayline.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    site.delayline.kill()
                    out = b""
                for line in out.decode().splitlines():
                    if line.startswith('{"delayline"'):
                        self.delayline_stats.update(json.loads(line)["delayline"])
            site.delayline = None
            if site.node.inNamespace:  # the table goes with the namespace anyway
                site.node.cmd(f"nft delete table netdev {self.table} 2>/dev/null")
            else:
                _delete_root_table(self.table)
            for divert in site.diverts.values():
                site.node.cmd(f"ip link del {divert}a 2>/dev/null")
            site.diverts.clear()


def interface_packets(emu) -> dict[str, tuple[int, int]]:
    """(tx, rx) packets of every link interface of `emu`, read in its namespace."""
    out = {}
    for node in emu.node.values():
        for intf in node.intfList():
            if intf.name == "lo" or intf.link is None:
                continue
            text = node.cmd(
                f"cat /sys/class/net/{intf.name}/statistics/tx_packets "
                f"/sys/class/net/{intf.name}/statistics/rx_packets"
            )
            tx, rx = (int(v) for v in text.split()[:2])
            out[intf.name] = (tx, rx)
    return out


def measured(
    emu,
    chains: dict[str, dict[str, Any]],
    before: dict[str, tuple[int, int]],
    after: dict[str, tuple[int, int]],
) -> dict[str, Any]:
    """The rate that really happened, from counters only: frames the egress chains saw against
    what the far ends received (interface rx), and the chains' own hit ratio."""
    peer = {}
    for link in emu.net.links:
        peer[link.intf1.name], peer[link.intf2.name] = link.intf2.name, link.intf1.name
    seen = sum(c["seen"] for c in chains.values())
    hit = sum(c["hit"] for c in chains.values())
    received = sum(after[peer[i]][1] - before[peer[i]][1] for i in chains if i in peer)
    rates: dict[str, Any] = frame_rates(seen, hit, received)
    if any("lost" in c for c in chains.values()):
        rates["frames_lost"] = {
            kind: sum(c.get("lost", {}).get(kind, 0) for c in chains.values())
            for kind in LOST_KINDS
        }
    return rates


def frame_rates(offered: int, hit: int, received: int) -> dict[str, float]:
    """The counts and the rates they make: the share of offered frames the rules hit, and
    of those the far ends received (also for counts summed over several emulations)."""
    return {
        "frames_offered": offered,
        "frames_hit": hit,
        "hit_percent": round(100 * hit / max(1, offered), 3),
        "frames_received_by_far_ends": received,
        "received_per_offered": round(received / max(1, offered), 4),
    }


def _delete_root_table(table: str) -> None:
    subprocess.run(["nft", "delete", "table", "netdev", table], capture_output=True, check=False)


def remove_leftover_tables() -> list[str]:
    """Delete the root namespace's impairment tables (an earlier run's, killed before it
    cleaned up; module docstring) and return their names. One emulation runs at a time, so
    none of them belongs to a live run."""
    if not _nft_available():
        return []
    listing = subprocess.run(
        ["nft", "-j", "list", "tables", "netdev"], capture_output=True, text=True, check=False
    )
    try:
        entries = json.loads(listing.stdout)["nftables"]
    except (ValueError, KeyError):
        return []
    names = [
        e["table"]["name"]
        for e in entries
        if "table" in e and e["table"]["name"].startswith(TABLE_PREFIX)
    ]
    for name in names:
        _delete_root_table(name)
    return names


def _nft_available() -> bool:
    return shutil.which("nft") is not None


def _cmd(node, command: str) -> None:
    """Run `command` in the node's namespace; an error (nft's message) raises ImpairError."""
    out = node.cmd(f"{command}; echo rc=$?")
    body, _, rc = out.rpartition("rc=")
    if rc.strip() != "0":
        raise ImpairError(f"`{command.splitlines()[0]}` failed: {body.strip()[-400:]}")


def congest(emu, fraction: float, queue_packets: int | None = None) -> None:
    """Shape every link interface of `emu` to `fraction` of its rate; with `queue_packets`,
    a FIFO of that many packets under the shaper. Mininet's `max_queue_size` would do that
    through netem, which this kernel lacks (Mininet prints "Specified qdisc kind is unknown"
    and the queue stays at the default 1000 packets, seconds of delay at these rates)."""
    for link in emu.net.links:
        for intf in (link.intf1, link.intf2):
            intf.config(bw=intf.params["bw"] * fraction)  # htb root 5:0, class 5:1 (TCIntf)
            if queue_packets is not None:
                _cmd(
                    intf.node,
                    f"tc qdisc add dev {intf.name} parent 5:1 handle 10: pfifo "
                    f"limit {queue_packets}",
                )


def queue_drops(emu, skip: frozenset[frozenset[str]] = frozenset()) -> dict[str, int]:
    """Frames the queue disciplines of `emu`'s link interfaces have dropped so far (`tc -s`),
    by direction: "to PS", out of an interface whose far end is nearer a PS of the plan
    (contributions, ACKs, PROBEs), and "to workers" (results, CONTROL). Links in `skip`
    (pairs of node names, e.g. a cut link whose qdisc drops everything on bmv2) are left out."""
    graph = nx.Graph(emu.network.graph)
    hops = nx.multi_source_dijkstra_path_length(graph, {tp.ps for tp in emu.plan.tasks})
    model = {node.name: name for name, node in emu.node.items()}
    found = {"to PS": 0, "to workers": 0}
    for link in emu.net.links:
        for intf, peer in ((link.intf1, link.intf2), (link.intf2, link.intf1)):
            u, v = model[intf.node.name], model[peer.node.name]
            if frozenset((u, v)) in skip:
                continue
            text = intf.node.cmd(" ".join(qdisc.command(intf.name, stats=True)))
            toward = "to PS" if hops[v] < hops[u] else "to workers"
            found[toward] += qdisc.drops(qdisc.parse(text))
    return found


def mark_thresholds(emu) -> dict[str, dict[str, int]]:
    """The depths `emu`'s ports mark congestion from (p4src/README.md, "Congestion mark"), by
    port kind ("switch ports", "worker ports": a worker marks its own DATA), each as
    {depth: ports}, "never" for a port without a queue. The emulation's `mark_depth` where
    given, else what each port takes by default: bmv2's switches half of their own egress
    queue, the embedded target's switches and the workers half of their interface's qdisc
    limit, read here as they read it (`dataplane.qdisc`) in the node's namespace."""
    model = {node.name: name for name, node in emu.node.items()}
    found: dict[str, dict[str, int]] = {"switch ports": {}, "worker ports": {}}
    for link in emu.net.links:
        for intf in (link.intf1, link.intf2):
            name = model[intf.node.name]
            if emu.network.is_switch(name):
                kind = "switch ports"
            elif emu.network.role(name) == "worker":
                kind = "worker ports"
            else:
                continue
            if emu.mark_depth is not None:
                depth: int | None = emu.mark_depth
            elif kind == "switch ports" and emu.target == "bmv2":
                depth = BMV2_QUEUE_DEPTH // 2
            else:
                qdiscs = qdisc.parse(intf.node.cmd(" ".join(qdisc.command(intf.name))))
                txqueuelen = intf.node.cmd(f"cat /sys/class/net/{intf.name}/tx_queue_len")
                depth = qdisc.mark_depth(qdisc.limit_of(qdiscs, int(txqueuelen.strip() or 0)))
            key = "never" if depth is None else str(depth)
            found[kind][key] = found[kind].get(key, 0) + 1
    return found
