"""Starting bmv2 `simple_switch_grpc` as an INA switch, the one way every caller does it.

bmv2 runs the program p4c compiled from `p4src/ina.p4` (`dataplane.p4build.compile_for_bmv2()`
gives its JSON and P4Info), pushed later in SetForwardingPipelineConfig, so the switch starts
with `--no-p4`. Several
switches on one machine each need their own Thrift port (bmv2 opens 9090 otherwise and the
second switch dies), and packet-in/packet-out needs `--cpu-port` (p4src/README.md step 0).
The tests, the benchmark and the Mininet runner all build the command line here.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from dataplane.frame import CPU_PORT

SWITCH = "simple_switch_grpc"
HOW_TO_GET_BMV2 = (
    "simple_switch_grpc (bmv2 with P4Runtime) is not on PATH. Get it from the p4lang Docker "
    "image (docker pull p4lang/behavioral-model), from p4lang's packages for Ubuntu (the "
    "p4lang-bmv2 package), or build https://github.com/p4lang/behavioral-model with "
    "--with-pi; README.md lists the versions we test."
)


class Bmv2Missing(RuntimeError):
    """simple_switch_grpc is not installed; the message says how to get it."""


def switch_path() -> str | None:
    """simple_switch_grpc on PATH, or None."""
    return shutil.which(SWITCH)


_HANDED_OUT: set[int] = set()


def free_tcp_port() -> int:
    """A TCP port nobody listens on right now (for `--thrift-port` and the gRPC address),
    never one this process handed out before: the ports of an emulation's switches are all
    picked before any switch binds its own, and the kernel may offer a released port again
    (seen: two switches given 127.0.0.1:47371, the second refused as "already in use")."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def bmv2_command(
    interfaces: Mapping[int, str],
    grpc_addr: str,
    *,
    device_id: int = 1,
    thrift_port: int | None = None,
    cpu_port: int = CPU_PORT,
    switch: str = SWITCH,
) -> list[str]:
    """The simple_switch_grpc command line for ports `interfaces` (port -> Linux interface).

    Without `thrift_port` a free one is picked, so switches started side by side never share
    bmv2's default 9090.
    """
    ifaces = [arg for port, name in sorted(interfaces.items()) for arg in ("-i", f"{port}@{name}")]
    return [
        switch,
        "--device-id",
        str(device_id),
        *ifaces,
        "--no-p4",
        "--thrift-port",
        str(thrift_port or free_tcp_port()),
        "--",
        "--grpc-server-addr",
        grpc_addr,
        "--cpu-port",
        str(cpu_port),
    ]


def wait_listening(
    address: str, process: subprocess.Popen | None = None, timeout: float = 20.0
) -> None:
    """Return once `address` (host:port) accepts TCP; raise if `process` exits or time runs out."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            program = cast(list[str], process.args)[0]  # started with a list of str
            raise RuntimeError(
                f"the switch ({program}) exited with status "
                f"{process.returncode} before serving P4Runtime on {address}"
            )
        try:
            socket.create_connection((host, int(port)), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no switch served P4Runtime on {address} within {timeout:.0f} s")


def serving(process: subprocess.Popen, address: str, timeout: float = 20.0) -> subprocess.Popen:
    """`process` once it serves P4Runtime on `address`; if it does not, it is stopped (no switch
    is left behind a failed start) and wait_listening's error raised."""
    try:
        wait_listening(address, process, timeout)
    except RuntimeError:
        process.terminate()
        process.wait(timeout=10)
        raise
    return process


def start_bmv2(
    interfaces: Mapping[int, str],
    grpc_addr: str,
    *,
    device_id: int = 1,
    thrift_port: int | None = None,
    log_path: Path | None = None,
    wait: bool = True,
) -> subprocess.Popen:
    """Start simple_switch_grpc (raise Bmv2Missing when absent); by default return once its
    P4Runtime server listens. Its output goes to `log_path`, or nowhere."""
    path = switch_path()
    if path is None:
        raise Bmv2Missing(HOW_TO_GET_BMV2)
    cmd = bmv2_command(
        interfaces, grpc_addr, device_id=device_id, thrift_port=thrift_port, switch=path
    )
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    finally:
        if not isinstance(out, int):
            out.close()
    return serving(process, grpc_addr) if wait else process
