"""Network namespaces and veth pairs for tests, the demo and the benchmark.

Switch ends stay in the root namespace (where the switch process and its gRPC port live); host
ends move into a private namespace, and raw sockets are opened there through setns(2) in a
short-lived thread so the test process itself never changes namespace.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from typing import Self

from dataplane.ports import open_raw

CLONE_NEWNET = 0x40000000


def ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


@dataclass
class VethNet:
    """`ports` veth pairs: switch end `switch_if[p]` in the root namespace, host end in `ns`."""

    ports: int
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    switch_if: dict[int, str] = field(default_factory=dict)
    host_if: dict[int, str] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        return f"inat{self.tag}"

    def create(self) -> None:
        ip("netns", "add", self.ns)
        for port in range(1, self.ports + 1):
            sw, host = f"is{self.tag}p{port}", f"ih{self.tag}p{port}"
            ip("link", "add", sw, "type", "veth", "peer", "name", host)
            self.switch_if[port], self.host_if[port] = sw, host
            ip("link", "set", host, "netns", self.ns)
            for args in (
                ["link", "set", sw, "up"],
                ["netns", "exec", self.ns, "ip", "link", "set", host, "up"],
            ):
                ip(*args)
            _quiet(["sysctl", "-qw", f"net.ipv6.conf.{sw}.disable_ipv6=1"])
            _quiet(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.ns,
                    "sysctl",
                    "-qw",
                    f"net.ipv6.conf.{host}.disable_ipv6=1",
                ]
            )

    def __enter__(self) -> Self:
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def destroy(self) -> None:
        for sw in self.switch_if.values():
            ip("link", "del", sw, check=False)
        ip("netns", "del", self.ns, check=False)

    def host_socket(self, port: int) -> socket.socket:
        """A raw socket on the host end of `port`, opened inside the namespace."""
        return in_netns(self.ns, lambda: open_raw(self.host_if[port]))


def _quiet(cmd: list[str]) -> None:
    """Best effort: without IPv6 the veths carry no router solicitations, only test traffic."""
    subprocess.run(cmd, check=False, capture_output=True)


def in_netns(ns: str, fn):
    """Run `fn` in a thread that has entered namespace `ns` (a name under /var/run/netns, or
    a path such as /proc/PID/ns/net, a Mininet host's); return its result."""
    libc = ctypes.CDLL(None, use_errno=True)
    result: list = []
    error: list[Exception] = []

    def run() -> None:
        fd = os.open(ns if ns.startswith("/") else f"/var/run/netns/{ns}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
            result.append(fn())
        except Exception as exc:  # re-raised by the caller below
            error.append(exc)
        finally:
            os.close(fd)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
