"""A management network for an emulation: how agents on Mininet's hosts reach the controller.

Each Mininet host is a network namespace of its own, so the controller's API on the root
namespace's loopback is out of its agents' reach. As a cluster's hosts reach their controller
over a management network beside the data plane, every host here gets a second interface,
`mgmt0`, on one Linux bridge in the root namespace whose own address the API listens on. The
data plane never sees it: agents send and receive on the host's first interface only.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from typing import Any

# Apart from the hosts' data-plane addresses (controller.compiler.program.HOST_SUBNET).
SUBNET = ipaddress.IPv4Network("10.255.0.0/16")
BRIDGE = "inamgmt0"
HOST_INTERFACE = "mgmt0"


class ManagementError(RuntimeError):
    """An `ip` command failed; the message says which and why."""


def _ip(*args: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise ManagementError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Management:
    """The bridge, its address (`address`, where the API listens) and each host's address."""

    bridge: str = BRIDGE  # and the hosts' links' root ends are `{bridge}p{i}`
    subnet: ipaddress.IPv4Network = SUBNET
    host_address: dict[str, str] = field(default_factory=dict)
    _root_ends: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return str(self.subnet[-2])

    def connect(self, hosts: dict[str, Any]) -> None:
        """Give every Mininet host in `hosts` (model name -> node) its `mgmt0` on the bridge."""
        self.close()  # a bridge an interrupted run left behind
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (name, node) in enumerate(sorted(hosts.items())):
            root_end, address = f"{self.bridge}p{i}", str(self.subnet[i + 1])
            _ip("link", "del", root_end, check=False)
            _ip(
                "link", "add", root_end, "type", "veth", "peer", "name", HOST_INTERFACE,
                "netns", str(node.pid),
            )  # fmt: skip
            self._root_ends.append(root_end)
            _ip("link", "set", root_end, "master", self.bridge, "up")
            failed = node.cmd(
                f"ip addr add {address}/{self.subnet.prefixlen} dev {HOST_INTERFACE} && "
                f"ip link set {HOST_INTERFACE} up"
            ).strip()
            if failed:
                raise ManagementError(f"{name}'s {HOST_INTERFACE}: {failed}")
            self.host_address[name] = address

    def close(self) -> None:
        """Remove the bridge and the root ends of the hosts' links (their pairs go too)."""
        for root_end in self._root_ends:
            _ip("link", "del", root_end, check=False)
        self._root_ends.clear()
        _ip("link", "del", self.bridge, check=False)
