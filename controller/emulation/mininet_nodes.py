"""Mininet building blocks for INA networks: a topology YAML as a Mininet `Topo`, and the switch
classes that run one P4Runtime switch process each (the embedded target, or bmv2
`simple_switch_grpc`).

Two users, one copy: `ina mininet` (controller/emulation/mininet_runner.py) and `mn --custom
mininet/ina.py --topo ina,FILE --switch embedded|bmv2` for people who drive Mininet by hand and
then start `ina controller` themselves. Mininet has switch classes for Open vSwitch and the
reference OpenFlow switch only; the P4 ones (as in p4lang's tutorials) are written here.

Hosts and switches are named h1.., s1.. in the order of the topology file (Mininet interface
names stay short whatever the model calls them); `InaTopo.model_name` maps them back. Links are
TCLinks shaped to the model's capacities times `scale_mbps` (Mbps per model Gbps), with the
model's port numbers, so the controller's port numbers hold on the emulated switches.
Their htb class gets an explicit quantum (`ShapedIntf`): left to htb, a class of more than
16 Mbit/s gets a quantum it warns about, and Mininet prints every warning as an error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

from mininet.link import TCIntf, TCLink
from mininet.node import Host, Switch
from mininet.topo import Topo

from controller.compiler.program import Numbering
from controller.model.network import Network, load_topology
from dataplane.bmv2 import bmv2_command, free_tcp_port, wait_listening
from dataplane.p4build import compile_for_bmv2
from dataplane.targets import embedded_command

# Bytes an htb class may send per round among its siblings: one full frame. Each link has one
# class, so it only needs to be valid; htb's own choice (rate / 10) warns above 16 Mbit/s.
HTB_QUANTUM = 1514


class ShapedIntf(TCIntf):
    """Mininet's shaped interface, with `HTB_QUANTUM` set on its htb class."""

    def bwCmds(self, *args: object, **kwargs: object) -> tuple[list[str], str]:
        cmds, parent = super().bwCmds(*args, **kwargs)
        return [c + f" quantum {HTB_QUANTUM}" if " htb rate " in c else c for c in cmds], parent


class ShapedLink(TCLink):
    """A TCLink of `ShapedIntf`s."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("cls1", ShapedIntf)
        kwargs.setdefault("cls2", ShapedIntf)
        super().__init__(*args, **kwargs)


# p4lang's tutorials put switch N's gRPC server on 50050 + N; `mn --custom` does the same so
# that the switches file it writes stays valid from one run to the next.
GRPC_BASE_PORT = 50050


class SwitchProcessError(RuntimeError):
    """A switch process exited at start or never listened; the message names the switch."""


class InaHost(Host):
    """A worker or PS host: IPv6 off, so nothing but the job's frames reaches its raw socket."""

    def config(self, **params):
        done = super().config(**params)
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        return done


class P4RuntimeSwitch(Switch):
    """One switch process in the root namespace, on this node's interfaces, programmed over
    P4Runtime at `address`; `command()` is the target's command line."""

    def __init__(
        self,
        name: str,
        *,
        model: str | None = None,
        device_id: int = 1,
        grpc_port: int | None = None,
        log_dir: str | Path | None = None,
        switches_file: str | Path | None = None,
        **params,
    ):
        super().__init__(name, dpid=f"{device_id:x}", **params)
        self.model = model or name
        self.device_id = device_id
        self.address = f"127.0.0.1:{grpc_port or free_tcp_port()}"
        self.log_dir = Path(log_dir or "/tmp")
        self.switches_file = Path(switches_file) if switches_file else None
        self.proc: subprocess.Popen | None = None
        self._log: BinaryIO | None = None

    def port_map(self) -> dict[int, str]:
        """Front-panel port number → interface name (the loopback control port 0 excluded)."""
        return {port: intf.name for intf, port in self.ports.items() if port > 0}

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        return None  # inherit ours

    def start(self, controllers) -> None:
        """Start the switch process and wait until its P4Runtime server listens; with
        `boot_in_background` set, return once it is started (`wait_started` waits): the
        processes of a large network then boot together instead of one after the other."""
        self.launch()
        if not self.boot_in_background:
            self.wait_started()

    boot_in_background = False

    def launch(self) -> None:
        """Start the switch process on this node's interfaces."""
        host, port = self.address.rsplit(":", 1)
        with socket.socket() as probe:
            if probe.connect_ex((host, int(port))) == 0:
                raise SwitchProcessError(
                    f"switch {self.model}: {self.address} is already in use (a switch left over "
                    "from an earlier run? `ss -ltnp` names the process)"
                )
        for name in self.port_map().values():
            # IPv6 off on the switch's ports too: the kernel would send router solicitations
            # out of them for minutes (4 s, 8 s, 16 s ... apart), into the hosts' raw sockets,
            # where a PS waiting for quiet before it exits takes them for traffic.
            self.cmd(f"sysctl -qw net.ipv6.conf.{name}.disable_ipv6=1")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = (self.log_dir / f"switch-{self.model}.log").open("ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=self.env()
        )

    def wait_started(self) -> None:
        """Wait until the launched process's P4Runtime server listens, then register it."""
        try:
            wait_listening(self.address, self.proc)
        except RuntimeError as exc:
            raise SwitchProcessError(f"switch {self.model}: {exc}") from None
        if self.switches_file is not None:
            self._register(self.switches_file)

    def _register(self, switches_file: Path) -> None:
        """Add this switch to the `--switches` file of `ina controller` (switches start one
        after the other in Mininet's process, so read-modify-write is safe)."""
        listed = json.loads(switches_file.read_text() or "{}")
        listed[self.model] = {"address": self.address, "device_id": self.device_id}
        switches_file.write_text(json.dumps(listed, indent=2) + "\n")

    def stop_process(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            (self.proc.kill if kill else self.proc.terminate)()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self, deleteIntfs: bool = True) -> None:  # Mininet's signature
        self.stop_process()
        super().stop(deleteIntfs)

    def restart(self) -> None:
        """Kill the process (a crash, not a clean exit) and start it again, empty."""
        self.stop_process(kill=True)
        self.launch()
        self.wait_started()


class EmbeddedSwitch(P4RuntimeSwitch):
    """The embedded software target (`python -m dataplane switch`, the same as `ina switch`
    without the controller's imports: 30 MB and 2 s less per switch), simple_switch_grpc's
    flags.
    It runs under this interpreter with this process's module path: under `mn --custom` that
    is Debian's python3 plus the project's virtual environment (mininet/ina.py)."""

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

    def command(self) -> list[str]:
        return embedded_command(self.port_map(), self.address, self.device_id)


class Bmv2Switch(P4RuntimeSwitch):
    """bmv2 `simple_switch_grpc`, started empty (`--no-p4`): the controller pushes p4c's JSON
    and P4Info (dataplane.p4build). Each switch needs its own Thrift port (every one binds 9090
    otherwise and the second dies) and `--cpu-port 510` for packet-in/out (p4src/README.md)."""

    def __init__(self, name: str, **params):
        super().__init__(name, **params)
        self.thrift_port = free_tcp_port()

    def start(self, controllers) -> None:
        compile_for_bmv2()  # the JSON and P4Info the controller will push (p4src/build/)
        super().start(controllers)

    def command(self) -> list[str]:
        return bmv2_command(
            self.port_map(), self.address, device_id=self.device_id, thrift_port=self.thrift_port
        )


class BareSwitch(Switch):
    """Interfaces only, no process: a node another program bridges (Open vSwitch plain switches
    under the OpenFlow controller, controller/southbound/openflow/)."""

    def __init__(self, name: str, *, model: str | None = None, device_id: int = 1, **params):
        for key in ("grpc_port", "log_dir", "switches_file"):
            params.pop(key, None)
        super().__init__(name, dpid=f"{device_id:x}", **params)
        self.model = model or name

    def port_map(self) -> dict[int, str]:
        return {port: intf.name for intf, port in self.ports.items() if port > 0}

    def start(self, controllers) -> None:
        pass


SWITCH_CLASSES: dict[str, type[P4RuntimeSwitch]] = {"embedded": EmbeddedSwitch, "bmv2": Bmv2Switch}


class InaTopo(Topo):
    """A topology file (or a loaded Network) as Mininet nodes and shaped links.

    `nodes`, if given, are the model nodes to create (the hosts and switches a plan uses,
    `controller.emulation.subset`): links with an end left out are left out too, and the
    others keep the model's port numbers, addresses and device ids.
    `switch_cls` is the P4 switch class (None: the Mininet default, e.g. `mn --switch`);
    `bare` names model switches that get `BareSwitch` instead; `grpc_base` fixes switch i's
    gRPC port to grpc_base + i (None: free ports); `switches_file`, if given, lists the P4
    switches for `ina controller --switches` as they start.
    """

    def build(
        self,
        topology: str | Path | Network,
        scale_mbps: float = 2.0,
        switch_cls: type[Switch] | None = None,
        bare: frozenset[str] = frozenset(),
        grpc_base: int | None = None,
        log_dir: str | Path | None = None,
        switches_file: str | Path | None = None,
        nodes: frozenset[str] | None = None,
    ) -> None:
        network = topology if isinstance(topology, Network) else load_topology(topology)
        wanted = nodes if nodes is not None else frozenset(network.graph.nodes)
        self.network, self.scale_mbps = network, scale_mbps
        if switches_file:
            Path(switches_file).parent.mkdir(parents=True, exist_ok=True)
            Path(switches_file).write_text("{}\n")
        ips = Numbering(network).host_ip
        self.mininet_name: dict[str, str] = {}
        for i, host in enumerate(network.hosts):
            if host not in wanted:
                continue
            self.mininet_name[host] = self.addHost(f"h{i + 1}", cls=InaHost, ip=f"{ips[host]}/16")
        for i, switch in enumerate(network.switches):
            if switch not in wanted:
                continue
            cls = BareSwitch if switch in bare else switch_cls
            extra = {"cls": cls} if cls else {}
            self.mininet_name[switch] = self.addSwitch(
                f"s{i + 1}",
                model=switch,
                device_id=i + 1,
                log_dir=log_dir,
                grpc_port=grpc_base + i + 1 if grpc_base else None,
                switches_file=switches_file,
                **extra,
            )
        self.model_name = {v: k for k, v in self.mininet_name.items()}
        graph, done = network.graph, set()
        for u, v, data in graph.edges(data=True):
            if (v, u) in done or not {u, v} <= wanted:
                continue
            done.add((u, v))
            back = graph.edges[v, u]
            self.addLink(
                self.mininet_name[u],
                self.mininet_name[v],
                cls=ShapedLink,
                port1=data["out_port"],
                port2=data["in_port"],
                params1={"bw": data["capacity_gbps"] * scale_mbps},
                params2={"bw": back["capacity_gbps"] * scale_mbps},
            )
