"""`ina bench ...`: benchmark commands (JSON + PNG into an output directory, never assertions).

Each benchmark module exposes `add_parser(bench_subparsers)` and is listed in `BENCHMARKS`;
adding `bench target`, `bench e2e` or `bench compare` is one more entry there.
"""

from __future__ import annotations

import argparse
import importlib

# sub-subcommand → module with `add_parser(subparsers)`
BENCHMARKS: dict[str, str] = {
    "aro": "controller.tools.bench.aro",
    "compare": "controller.tools.bench.compare",
    "target": "dataplane.bench",
    "e2e": "controller.tools.bench.e2e",
    "eina": "controller.tools.bench.eina",
    "paring": "controller.tools.bench.paring",
    "atro": "controller.tools.bench.atro",
    "failover": "controller.tools.bench.failover",
    "reliability": "controller.tools.bench.reliability",
    "scale": "controller.tools.bench.scale",
    "jobs": "controller.tools.bench.jobs",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Called by `controller.cli`: adds `bench` and one sub-subcommand per benchmark."""
    parser = subparsers.add_parser("bench", help="run a benchmark (writes JSON and PNG)")
    bench = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for module in BENCHMARKS.values():
        importlib.import_module(module).add_parser(bench)
