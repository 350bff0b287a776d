"""The two switch targets behind one call: the embedded `ina switch` or bmv2 `simple_switch_grpc`.

Both start without a program and take it in SetForwardingPipelineConfig: the embedded target
with the checked-in P4Info (it executes the fixed program of p4src/README.md), bmv2 with p4c's
JSON and the same P4Info as p4c wrote it. The packet tests, the demo and the benchmark start
switches through here so that both targets see the same traffic and the same entries.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4i

from dataplane.bmv2 import HOW_TO_GET_BMV2, bmv2_command, serving, switch_path
from dataplane.p4build import HOW_TO_GET_P4C, compile_for_bmv2, compiler_path
from dataplane.schema import P4INFO_PATH, load_p4info

KINDS = ("embedded", "bmv2")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Program:
    """What a client pushes in SetForwardingPipelineConfig."""

    p4info: p4i.P4Info
    device_config: bytes


def missing(kind: str) -> str | None:
    """Why `kind` cannot run on this machine (what to install), or None."""
    if kind == "bmv2":
        if switch_path() is None:
            return HOW_TO_GET_BMV2
        if compiler_path() is None:
            return HOW_TO_GET_P4C
    return None


def program_for(kind: str) -> Program:
    """The INA program for `kind` (bmv2: compiled by p4c first when stale)."""
    if kind == "bmv2":
        built = compile_for_bmv2()
        return Program(load_p4info(built.p4info), built.json.read_bytes())
    return Program(load_p4info(P4INFO_PATH), b"")


def command_for(
    kind: str, interfaces: Mapping[int, str], address: str, device_id: int = 1
) -> list[str]:
    """The switch's command line; `interfaces` maps port numbers to Linux interfaces."""
    if kind == "bmv2":
        return bmv2_command(interfaces, address, device_id=device_id)
    return embedded_command(interfaces, address, device_id)


def embedded_command(interfaces: Mapping[int, str], address: str, device_id: int = 1) -> list[str]:
    """`python -m dataplane switch` (`ina switch` without the controller's imports) under this
    interpreter, with simple_switch_grpc's flags."""
    ifaces = [arg for port, name in sorted(interfaces.items()) for arg in ("-i", f"{port}@{name}")]
    return [
        sys.executable,
        "-m",
        "dataplane",
        "switch",
        "--device-id",
        str(device_id),
        "--grpc-addr",
        address,
        *ifaces,
        "--log-level",
        "warning",
    ]


def start_target(
    kind: str, interfaces: Mapping[int, str], address: str, device_id: int = 1
) -> subprocess.Popen:
    """Start the switch and return once it serves P4Runtime on `address`."""
    return serving(
        subprocess.Popen(
            command_for(kind, interfaces, address, device_id), cwd=ROOT, stdout=subprocess.DEVNULL
        ),
        address,
    )
