"""A switch process that does not come up serving P4Runtime is stopped, not left behind, and
the error says why (`dataplane.bmv2.serving`, used by both targets' launchers)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from dataplane.bmv2 import free_tcp_port, serving


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_switch_that_never_listens_is_stopped_when_time_runs_out():
    process = _sleeper()
    with pytest.raises(RuntimeError, match="no switch served"):
        serving(process, f"127.0.0.1:{free_tcp_port()}", timeout=0.3)
    assert process.poll() is not None


def test_a_switch_that_exits_is_reported_with_its_status():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="status 3"):
        serving(process, f"127.0.0.1:{free_tcp_port()}", timeout=20)
    assert process.returncode == 3


def test_a_switch_that_listens_is_returned_running():
    with socket.create_server(("127.0.0.1", 0)) as server:
        process = _sleeper()
        try:
            assert serving(process, f"127.0.0.1:{server.getsockname()[1]}") is process
            assert process.poll() is None
        finally:
            process.kill()
            process.wait()
