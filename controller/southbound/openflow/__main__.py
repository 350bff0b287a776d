"""The command line: `python -m controller.southbound.openflow` runs the OpenFlow controller
(`controller_command` builds this command for the Mininet runner)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from controller.compiler.program import CompileError
from controller.model.network import TopologyError, load_topology
from controller.model.plan import PlanFormatError, load_plan
from controller.southbound.openflow.app import serve
from controller.southbound.openflow.follow import UNREADABLE, Announced, Follow
from controller.southbound.openflow.rules import compile_openflow

DEFAULT_LISTEN = "127.0.0.1:6653"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controller.southbound.openflow",
        description="OpenFlow 1.3 controller installing a plan's per-flow forwarding on the "
        "plain switches (Open vSwitch) of a topology.",
    )
    parser.add_argument("--topology", type=Path, required=True)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--plan-version", type=int, default=1)
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT (default %(default)s)")
    parser.add_argument(
        "--state", type=Path, help="JSON file: install times per switch, plan versions installed"
    )
    parser.add_argument(
        "--follow-state",
        type=Path,
        metavar="FILE",
        help="the daemon's state file: follow its plan versions",
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=2.0,
        help="delete an old plan version this long after the hosts left it "
        "(default %(default)s, the daemon's)",
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    try:
        network = load_topology(args.topology)
        first = _first_version(args)
        follow = (
            Follow(network, args.follow_state, args.drain_seconds) if args.follow_state else None
        )
        tables = compile_openflow(
            network.without_links(set(first.dead_links)), first.plan, first.version
        )
    except (OSError, TopologyError, PlanFormatError, CompileError) as exc:
        print(f"openflow controller: {exc}", file=sys.stderr)
        return 2
    serve(tables, args.listen, args.state, version=first.version, follow=follow)
    return 0


def _first_version(args: argparse.Namespace) -> Announced:
    """The plan to start with: `--plan`, or what the hosts follow if the daemon is further on
    (a restarted controller must not set the switches back to an old version)."""
    given = Announced(args.plan_version, load_plan(args.plan))
    if args.follow_state is None:
        return given
    try:
        published = Announced.from_dict(json.loads(args.follow_state.read_text()))
    except UNREADABLE:
        return given
    return published if published.version > given.version else given


if __name__ == "__main__":
    sys.exit(main())
