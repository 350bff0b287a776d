"""`ina switch`, `ina worker`, `ina ps`, `ina dataplane-demo`: the data-plane commands.

`ina switch` takes simple_switch_grpc's flags (`--device-id`, `-i PORT@IFACE`, the gRPC address,
`--no-p4`) so the Mininet runner can start either target with the same arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from dataplane.frame import CPU_PORT


def _interface(text: str) -> tuple[int, str]:
    port, sep, name = text.partition("@")
    if not sep or not port.isdigit() or not 0 < int(port) < CPU_PORT or not name:
        raise argparse.ArgumentTypeError(f"expected PORT@IFACE with PORT in 1..{CPU_PORT - 1} "
                                         f"({CPU_PORT} is the controller port), got {text!r}")
    return int(port), name


def cmd_switch(args: argparse.Namespace) -> int:
    from dataplane.switch import run_switch

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run_switch(args.device_id, args.grpc_addr, dict(args.interface)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the data-plane subcommands to the `ina` command line."""
    p = subparsers.add_parser("switch", help="run an embedded INA switch (P4Runtime target)")
    p.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (default 1)")
    p.add_argument("--grpc-addr", "--grpc-server-addr", default="127.0.0.1:9559",
                   metavar="HOST:PORT", help="P4Runtime listen address (default 127.0.0.1:9559)")
    p.add_argument("-i", "--interface", type=_interface, action="append", default=[],
                   metavar="PORT@IFACE", help="attach interface IFACE as port PORT (repeatable)")
    p.add_argument("--no-p4", action="store_true",
                   help="accepted for simple_switch_grpc compatibility; the target always "
                        "starts without a pipeline and waits for SetForwardingPipelineConfig")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    p.set_defaults(func=cmd_switch)

    from dataplane import demo, hosts

    hosts.register(subparsers)
    demo.register(subparsers)
