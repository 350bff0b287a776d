"""The emulation's management network (controller/emulation/management.py) on plain network
namespaces (root, no Mininet): a host in its own namespace reaches a TCP server on the
bridge's address through `mgmt0`, and closing removes every interface it made."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import threading

import pytest

from controller.emulation.management import HOST_INTERFACE, Management

# Not the emulations' bridge nor subnet: a Mininet run may hold those.
BRIDGE, SUBNET = "inamgtest", ipaddress.IPv4Network("10.254.0.0/24")

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


class _Namespace:
    """A process in a new network namespace, standing for a Mininet host: `pid` and `cmd`."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["unshare", "--net", "sleep", "120"])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cmd(self, command: str) -> str:
        done = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-n", "sh", "-c", command],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout + done.stderr

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_hosts_reach_the_bridge_address_and_close_leaves_nothing():
    hosts = {"H0": _Namespace(), "H1": _Namespace()}
    management = Management(bridge=BRIDGE, subnet=SUBNET)
    server = socket.socket()
    try:
        management.connect(hosts)
        assert f" {BRIDGE}:" in _links()
        server.bind((management.address, 0))
        server.listen()
        port = server.getsockname()[1]
        accepted = []
        threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
        reply = hosts["H1"].cmd(
            "python3 -c 'import socket; s = socket.create_connection("
            f'("{management.address}", {port}), timeout=5); print(s.getsockname()[0])\''
        )
        assert reply.strip() == management.host_address["H1"]
        assert f"{HOST_INTERFACE}@" in hosts["H0"].cmd("ip -o link")
        assert len(set(management.host_address.values())) == 2
    finally:
        server.close()
        management.close()
        for host in hosts.values():
            host.close()
    links = _links()
    assert BRIDGE not in links
