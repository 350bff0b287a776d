"""`python -m dataplane switch|worker|ps|dataplane-demo|bench target`: without the controller
CLI."""

from __future__ import annotations

import argparse
import sys

from dataplane import bench
from dataplane.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dataplane")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register(sub)
    bench_parser = sub.add_parser("bench", help="data-plane benchmarks")
    bench.add_parser(bench_parser.add_subparsers(dest="bench", required=True, metavar="BENCH"))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
