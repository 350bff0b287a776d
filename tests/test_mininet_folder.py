"""The top-level `mininet/` folder: `mn --custom mininet/ina.py` builds a topology YAML with our
switch classes, and the folder never shadows Debian's `mininet` package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES

from dataplane.p4build import BUILD_DIR, compiler_path

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_PYTHON = "/usr/bin/python3"


def test_the_folder_is_not_a_package():
    assert (ROOT / "mininet" / "ina.py").exists()
    assert not (ROOT / "mininet" / "__init__.py").exists()


@pytest.mark.parametrize("python", [sys.executable, DEBIAN_PYTHON])
def test_importing_mininet_from_the_repository_root_gets_the_real_package(python):
    """Run from the repository root ('' first on sys.path), `import mininet` must still be
    Mininet (a regular package wins over our folder, a namespace portion at best)."""
    if not Path(python).exists():
        pytest.skip(f"{python} is not installed")
    done = subprocess.run(
        [python, "-c", "import mininet.net, mininet; print(mininet.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if "No module named 'mininet'" in done.stderr:
        pytest.skip(f"Mininet is not installed for {python} (apt-get install mininet)")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve().parent != (ROOT / "mininet").resolve()


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root (CI runs as root)")
@pytest.mark.skipif(
    shutil.which("mn") is None, reason="mn is not installed (apt-get install mininet)"
)
@pytest.mark.parametrize("switch", ["embedded", "bmv2"])
def test_mn_custom_builds_the_yaml_and_ina_controller_programs_it(switch, tmp_path):
    """What a user does by hand: mn builds ARO Fig. 1 from the YAML with our switch class and
    lists the switches; `ina controller` programs them from that list; then a host reaches
    the PS through the programmed switches (IPv4 routes; static ARP from mn --arp)."""
    extra = []
    if switch == "bmv2":
        if shutil.which("simple_switch_grpc") is None or compiler_path() is None:
            pytest.skip("bmv2 or p4c is not on PATH (see tests/test_mininet_bmv2.py)")
        extra = [
            "--p4blob",
            str(BUILD_DIR / "ina.json"),
            "--p4info",
            str(BUILD_DIR / "ina.p4info.txtpb"),
        ]
    topology = EXAMPLES / "aro-fig1.yaml"
    controller = " ".join(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "controller",
            str(topology),
            "--switches",
            "out/mininet/switches.json",
            "--once",
            "--state",
            str(tmp_path / "state.json"),
            "--log-level",
            "warning",
            *extra,
        ]
    )
    script = (
        f"sh cd {tmp_path} && {controller} > controller.log 2>&1; "
        "echo controller exit $?\n"
        "h2 ping -c1 -W3 h1\n"
    )
    done = subprocess.run(
        [
            "mn",
            "--custom",
            str(ROOT / "mininet" / "ina.py"),
            "--topo",
            f"ina,{topology}",
            "--switch",
            switch,
            "--arp",
        ],
        input=script,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={
            **os.environ,
            "VIRTUAL_ENV": sys.prefix,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
    )
    out = done.stdout + done.stderr
    listed = (tmp_path / "out" / "mininet" / "switches.json").read_text()
    assert all(f'"{s}"' in listed for s in ("L0", "L1", "L2", "L3", "S0", "S1")), listed
    assert "controller exit 0" in out, out[-2000:] + (tmp_path / "controller.log").read_text()
    assert "1 received" in out, out[-2000:]
