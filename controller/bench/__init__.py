"""`ina bench ...`: benchmark commands, one module per subcommand.

Each module listed in `COMMANDS` exposes `add_parser(sub)`, adding its own subcommand to the
`bench` parser; `register` is the hook `controller.cli` calls for every plugin package.
Modules are imported only when the command line is built, so benchmarks with heavy imports
(Dask, matplotlib) cost nothing elsewhere.
"""

from __future__ import annotations

import argparse
import importlib

COMMANDS: list[str] = ["controller.bench.compare"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `bench` and, under it, every module's subcommand."""
    bench = subparsers.add_parser("bench", help="reproduce the papers' benchmarks (JSON + PNG)")
    sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for module in COMMANDS:
        importlib.import_module(module).add_parser(sub)
