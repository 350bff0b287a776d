"""`ina switch`, `ina worker`, `ina ps`, `ina dataplane-demo`: the data-plane commands.

`ina switch` takes simple_switch_grpc's flags (`--device-id`, `-i PORT@IFACE`, the gRPC address,
`--no-p4`) so the Mininet runner can start either target with the same arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from dataplane.frame import CPU_PORT


def _interface(text: str) -> tuple[int, str]:
    port, sep, name = text.partition("@")
    if not sep or not port.isdigit() or not 0 < int(port) < CPU_PORT or not name:
        raise argparse.ArgumentTypeError(
            f"expected PORT@IFACE with PORT in 1..{CPU_PORT - 1} "
            f"({CPU_PORT} is the controller port), got {text!r}"
        )
    return int(port), name


class _Refused(Exception):
    """Options the switch will not start with; the message says which and why."""


def cmd_switch(args: argparse.Namespace) -> int:
    try:
        credentials = _server_credentials(args)
    except _Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from dataplane.switch import run_switch

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        asyncio.run(run_switch(args.device_id, args.grpc_addr, dict(args.interface), credentials))
    except OSError as exc:
        print(f"error: ina switch: {exc}", file=sys.stderr)
        return 1
    return 0


def _server_credentials(args: argparse.Namespace):
    """TLS credentials from the options, None for plain text (refused off loopback unless
    --insecure)."""
    from dataplane.tls import ServerTLS, TLSConfigError, is_loopback, plaintext_refusal

    tls_files = (args.grpc_server_cert, args.grpc_server_key, args.grpc_server_cacert)
    if not args.grpc_server_ssl:
        if any(tls_files) or args.grpc_server_with_client_auth:
            raise _Refused(
                "--grpc-server-cert, --grpc-server-key, --grpc-server-cacert and "
                "--grpc-server-with-client-auth need --grpc-server-ssl"
            )
        if not is_loopback(args.grpc_addr) and not args.insecure:
            raise _Refused(plaintext_refusal("ina switch: --grpc-addr", args.grpc_addr))
        return None
    if not (args.grpc_server_cert and args.grpc_server_key):
        raise _Refused(
            "--grpc-server-ssl needs --grpc-server-cert and --grpc-server-key "
            "(the switch's certificate and private key, PEM)"
        )
    try:
        return ServerTLS(
            args.grpc_server_cert,
            args.grpc_server_key,
            args.grpc_server_cacert,
            args.grpc_server_with_client_auth,
        ).credentials()
    except TLSConfigError as exc:
        raise _Refused(f"ina switch: {exc}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the data-plane subcommands to the `ina` command line."""
    p = subparsers.add_parser("switch", help="run an embedded INA switch (P4Runtime target)")
    p.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (default 1)")
    p.add_argument(
        "--grpc-addr",
        "--grpc-server-addr",
        default="127.0.0.1:9559",
        metavar="HOST:PORT",
        help="P4Runtime listen address (default 127.0.0.1:9559)",
    )
    p.add_argument(
        "-i",
        "--interface",
        type=_interface,
        action="append",
        default=[],
        metavar="PORT@IFACE",
        help="attach interface IFACE as port PORT (repeatable)",
    )
    p.add_argument(
        "--no-p4",
        action="store_true",
        help="accepted for simple_switch_grpc compatibility; the target always "
        "starts without a pipeline and waits for SetForwardingPipelineConfig",
    )
    # TLS, with simple_switch_grpc's option names (dataplane/tls.py).
    p.add_argument("--grpc-server-ssl", action="store_true", help="serve P4Runtime over TLS")
    p.add_argument("--grpc-server-cert", type=Path, metavar="PEM", help="the switch's certificate")
    p.add_argument("--grpc-server-key", type=Path, metavar="PEM", help="its private key")
    p.add_argument(
        "--grpc-server-cacert",
        type=Path,
        metavar="PEM",
        help="CA that signs the controllers' certificates",
    )
    p.add_argument(
        "--grpc-server-with-client-auth",
        action="store_true",
        help="require a controller certificate signed by --grpc-server-cacert",
    )
    p.add_argument(
        "--insecure", action="store_true", help="accept plain text on a non-loopback --grpc-addr"
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning"],
        help="log detail on stderr (default info)",
    )
    p.set_defaults(func=cmd_switch)

    from dataplane import agents, allreduce_demo, demo, multihost

    agents.register(subparsers)
    multihost.register(subparsers)
    demo.register(subparsers)
    allreduce_demo.register(subparsers)
