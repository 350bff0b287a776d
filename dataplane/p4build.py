"""The INA program compiled for bmv2: p4c's JSON and P4Info, rebuilt when the source changed.

bmv2 accepts only the P4Info that p4c wrote for the same JSON, so every component that drives
bmv2 (the Mininet runner, `ina controller --target bmv2`, the packet tests, the benchmarks)
takes both files from here rather than compiling on its own. The build folder is
`p4src/build/` (not checked in); `make p4` and the first caller fill it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

P4SRC = Path(__file__).resolve().parents[1] / "p4src"
SOURCE = P4SRC / "ina.p4"
BUILD_DIR = P4SRC / "build"
COMPILER = "p4c-bm2-ss"
HOW_TO_GET_P4C = (
    "p4c-bm2-ss (p4c with the bmv2 back end) is not on PATH. Get it from the p4lang Docker image "
    "(docker pull p4lang/p4c), from p4lang's packages for Ubuntu (the p4lang-p4c package), or "
    "build it from https://github.com/p4lang/p4c; README.md lists the versions we test."
)


class P4CompileError(RuntimeError):
    """p4c is missing or rejected the program; the message says which and what to do."""


@dataclass(frozen=True)
class Bmv2Program:
    """The two files SetForwardingPipelineConfig sends to a bmv2 switch."""

    json: Path
    p4info: Path


def compiler_path() -> str | None:
    """The p4c bmv2 compiler on PATH, or None."""
    return shutil.which(COMPILER)


def _sources() -> list[Path]:
    return sorted(P4SRC.glob("*.p4"))


def _is_fresh(program: Bmv2Program) -> bool:
    if not (program.json.exists() and program.p4info.exists()):
        return False
    built = min(program.json.stat().st_mtime, program.p4info.stat().st_mtime)
    return all(src.stat().st_mtime <= built for src in _sources())


def compile_for_bmv2(build_dir: Path = BUILD_DIR, *, force: bool = False) -> Bmv2Program:
    """Return p4c's JSON and P4Info for `p4src/ina.p4`, compiling it first when stale."""
    program = Bmv2Program(build_dir / "ina.json", build_dir / "ina.p4info.txtpb")
    if not force and _is_fresh(program):
        return program
    p4c = compiler_path()
    if p4c is None:
        raise P4CompileError(HOW_TO_GET_P4C)
    build_dir.mkdir(parents=True, exist_ok=True)
    cmd = [p4c, "--p4runtime-files", str(program.p4info), "-o", str(program.json), str(SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise P4CompileError(f"{COMPILER} rejected {SOURCE}:\n{done.stderr.strip()}")
    return program
