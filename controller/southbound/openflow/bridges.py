"""Plain switches run as Open vSwitch bridges (ovs-vsctl), shared by the tests and the
Mininet runner, and the OpenFlow controller process that programs them.

Switches are told apart by datapath id: switch `network.switches[i]` has datapath id i + 1
(the device id the P4 switches get), set on the bridge by `add_bridge`. `start_ovs_switches`
is what the Mininet runner calls: bridges on the switches' interfaces plus the controller
process, which publishes `{"version": V, "versions": [...], "switches": {NAME:
{"pushes_seconds": [...]}}}` (the P4 daemon's shape for the switches) after every (re)install
and every version added or deleted.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from controller.model.network import Network
from controller.model.plan import Plan
from controller.southbound.openflow.rules import datapath_id

_BRIDGE_SERIAL = itertools.count()


class OpenFlowError(RuntimeError):
    """Open vSwitch or the OpenFlow controller failed; the message says which and why."""


def add_bridge(bridge: str, dpid: int, ports: dict[int, str], controller: str) -> None:
    """Create a userspace-datapath OVS bridge whose OpenFlow port numbers are the topology's.

    fail-mode secure: without a controller the bridge forwards nothing (never floods like a
    learning switch); max_backoff 1 s: it reconnects quickly after a controller restart."""
    cmd = [
        "ovs-vsctl",
        "--",
        "--may-exist",
        "add-br",
        bridge,
        "--",
        "set",
        "bridge",
        bridge,
        "datapath_type=netdev",
        "protocols=OpenFlow13",
        "fail-mode=secure",
        f"other-config:datapath-id={dpid:016x}",
        "other-config:disable-in-band=true",
        "--",
        "set-controller",
        bridge,
        f"tcp:{controller}",
    ]
    for port, iface in sorted(ports.items()):
        cmd += [
            "--",
            "--may-exist",
            "add-port",
            bridge,
            iface,
            "--",
            "set",
            "interface",
            iface,
            f"ofport_request={port}",
        ]
    _run(cmd)
    _run(["ovs-vsctl", "set", "controller", bridge, "max_backoff=1000"])


def del_bridge(bridge: str) -> None:
    subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], check=False, capture_output=True)


def ensure_ovs_running() -> None:
    """Start ovsdb-server and ovs-vswitchd if they are not running (a fresh CI machine)."""
    if _ovs_answers():
        return
    for start in (
        ["service", "openvswitch-switch", "start"],
        ["/usr/share/openvswitch/scripts/ovs-ctl", "start"],
    ):
        subprocess.run(start, capture_output=True, check=False)
        if _ovs_answers():
            return
    raise OpenFlowError(
        "Open vSwitch is not running and could not be started "
        "(install openvswitch-switch: make setup)"
    )


def _ovs_answers() -> bool:
    return (
        subprocess.run(
            ["ovs-vsctl", "--timeout=3", "show"], check=False, capture_output=True
        ).returncode
        == 0
    )


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise OpenFlowError(f"{cmd[0]} failed: {done.stderr.strip()}")


def controller_command(
    topology: Path,
    plan: Path,
    listen: str,
    state: Path,
    version: int = 1,
    follow_state: Path | None = None,
    drain_seconds: float = 2.0,
) -> list[str]:
    follow = (
        ["--follow-state", str(follow_state), "--drain-seconds", f"{drain_seconds:g}"]
        if follow_state
        else []
    )
    return [
        sys.executable,
        "-m",
        "controller.southbound.openflow",
        "--topology",
        str(topology),
        "--plan",
        str(plan),
        "--listen",
        listen,
        "--state",
        str(state),
        "--plan-version",
        str(version),
        *follow,
        "--log-level",
        "warning",
    ]


def wait_programmed(
    state: Path, switches: list[str], proc: subprocess.Popen, timeout: float = 20.0, pushes: int = 1
) -> None:
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
    raise OpenFlowError(
        f"OpenFlow controller did not program {', '.join(switches)} within {timeout:g} s"
    )


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


def start_ovs_switches(
    network: Network,
    plan: Plan,
    switch_ports: dict[str, dict[int, str]],
    workdir: Path,
    *,
    version: int = 1,
    timeout: float = 30.0,
    follow_state: Path | None = None,
    drain_seconds: float = 2.0,
) -> OvsSwitches:
    """Run the plain switches named in `switch_ports` (switch → {port: interface}, interfaces in
    the root namespace) as OVS bridges under a new OpenFlow controller; returns once all of
    them hold the plan. With `follow_state` (the daemon's state file) the controller follows
    the daemon's plan versions. Writes plan, state and log to `workdir`; `close()` undoes it
    all."""
    ina = [s for s in switch_ports if network.is_ina(s)]
    if ina:
        raise OpenFlowError(f"INA switch(es) {', '.join(ina)} cannot run as Open vSwitch")
    if not Path(network.source).is_file():
        raise OpenFlowError(
            "the OpenFlow controller loads the topology from its file, and "
            f"this network has none ({network.source})"
        )
    ensure_ovs_running()
    plan_file = workdir / "openflow-plan.json"
    plan.save(plan_file)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{sock.getsockname()[1]}"
    state = workdir / "openflow-state.json"
    # Bridge names become interface names (at most 15 characters), unique per process and call.
    serial = next(_BRIDGE_SERIAL) % 100
    bridges = {
        s: f"ina{os.getpid() % 100000}-{serial}s{datapath_id(network, s)}" for s in switch_ports
    }
    command = controller_command(
        Path(network.source), plan_file, listen, state, version, follow_state, drain_seconds
    )
    ovs = OvsSwitches(bridges, command, state, (workdir / "openflow-controller.log").open("ab"))
    try:
        for switch, ports in switch_ports.items():
            add_bridge(bridges[switch], datapath_id(network, switch), ports, listen)
        ovs.start_controller(timeout)
    except BaseException:
        ovs.close()
        raise
    return ovs
