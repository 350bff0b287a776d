"""P4Runtime over TLS (dataplane/tls.py, controller/southbound/tls.py): both targets serve it, the
controller programs a switch whose certificate its CA signed for the address it dials, and refuses
any other; plain text is refused off loopback unless --insecure. Certificates are made per run
(tests/certs.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from certs import CA
from conftest import EXAMPLES, embedded_command, free_port, start_portless_switch

from dataplane.bmv2 import wait_listening
from dataplane.p4build import compile_for_bmv2
from dataplane.targets import KINDS, missing
from dataplane.tls import is_loopback

TOPOLOGY = EXAMPLES / "aro-fig1.yaml"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("pki")
    ca, stranger = CA(folder / "ca"), CA(folder / "stranger", "someone else's CA")
    return {
        "ca": ca.path,
        "switch": ca.issue("switch", server=True, hosts=("127.0.0.1", "localhost")),
        "elsewhere": ca.issue("elsewhere", server=True, hosts=("192.0.2.7", "s9.example")),
        "forged": stranger.issue("switch", server=True, hosts=("127.0.0.1",)),
        "controller": ca.issue("controller", server=False),
    }


def _tls_switch(kind: str, pair, address: str, client_ca: Path | None = None):
    """A switch of `kind` serving P4Runtime over TLS with `pair` (mutual TLS with
    `client_ca`); simple_switch_grpc's option names on both targets."""
    options = [
        "--grpc-server-ssl",
        "--grpc-server-cert",
        str(pair.cert),
        "--grpc-server-key",
        str(pair.key),
    ]
    if client_ca is not None:
        options += ["--grpc-server-cacert", str(client_ca), "--grpc-server-with-client-auth"]
    return start_portless_switch(kind, address, options)[0]


@pytest.fixture
def switch_of(request):
    """Start TLS switches for a test and stop them after it."""
    started: list[subprocess.Popen] = []

    def start(*args, **kwargs):
        started.append(_tls_switch(*args, **kwargs))
        return started[-1]

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def _controller(
    tmp_path: Path, address: str, *extra: str, kind: str = "embedded", timeout: float = 90
) -> subprocess.CompletedProcess:
    switches = tmp_path / "switches.json"
    switches.write_text(json.dumps({"S1": {"address": address}}))
    program = []
    if kind == "bmv2":
        built = compile_for_bmv2()
        program = ["--p4blob", str(built.json), "--p4info", str(built.p4info)]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "controller",
            str(TOPOLOGY),
            "--switches",
            str(switches),
            "--state",
            str(tmp_path / "state.json"),
            "--once",
            "--connect-timeout",
            "8",
            "--log-level",
            "warning",
            *program,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "GRPC_VERBOSITY": "NONE"},
    )


def _client(pki, *, authenticate: bool = True) -> list[str]:
    options = ["--tls-ca", str(pki["ca"])]
    if authenticate:
        options += [
            "--tls-cert",
            str(pki["controller"].cert),
            "--tls-key",
            str(pki["controller"].key),
        ]
    return options


@pytest.mark.parametrize("kind", KINDS)
def test_a_switch_serving_tls_is_programmed_over_mutual_tls(tmp_path, pki, switch_of, kind) -> None:
    if reason := missing(kind):
        pytest.skip(reason)
    address = f"127.0.0.1:{free_port()}"
    switch_of(kind, pki["switch"], address, client_ca=pki["ca"])
    done = _controller(tmp_path, address, *_client(pki), kind=kind)
    assert done.returncode == 0, done.stdout + done.stderr
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["switches"]["S1"]["problems"] == [] and state["version"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_switch_whose_certificate_another_ca_signed_is_refused(
    tmp_path, pki, switch_of, kind
) -> None:
    if reason := missing(kind):
        pytest.skip(reason)
    address = f"127.0.0.1:{free_port()}"
    switch_of(kind, pki["forged"], address)
    done = _controller(tmp_path, address, *_client(pki), kind=kind)
    assert done.returncode == 1
    assert f"switch S1 at {address} refused: its TLS certificate does not match" in done.stdout
    assert "unable to get local issuer certificate" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_certificate_issued_for_another_name_is_refused(tmp_path, pki, switch_of) -> None:
    address = f"127.0.0.1:{free_port()}"
    switch_of("embedded", pki["elsewhere"], address)
    done = _controller(tmp_path, address, *_client(pki))
    assert done.returncode == 1
    assert "IP address mismatch" in done.stdout, done.stdout
    # The same switch is accepted when the operator names the certificate's host.
    done = _controller(tmp_path, address, *_client(pki), "--tls-server-name", "s9.example")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_switch_requiring_client_certificates_does_not_take_a_controller_without(
    tmp_path, pki, switch_of
) -> None:
    address = f"127.0.0.1:{free_port()}"
    switch_of("embedded", pki["switch"], address, client_ca=pki["ca"])
    done = _controller(tmp_path, address, *_client(pki, authenticate=False))
    assert done.returncode == 1
    assert (
        f"switch S1 at {address} accepts connections but did not take the pipeline" in done.stdout
    )


def test_a_plain_text_controller_cannot_program_a_tls_switch(tmp_path, pki, switch_of) -> None:
    address = f"127.0.0.1:{free_port()}"
    switch_of("embedded", pki["switch"], address)
    done = _controller(tmp_path, address)
    assert done.returncode == 1 and f"switch S1 at {address}" in done.stdout


def test_plain_text_to_a_switch_off_loopback_needs_insecure(tmp_path) -> None:
    done = _controller(tmp_path, "192.0.2.1:9559")
    assert done.returncode == 2
    assert (
        "switch S1 at 192.0.2.1:9559: plain-text P4Runtime is allowed only on a loopback address"
        in done.stdout
        and "--insecure" in done.stdout
    )
    done = _controller(tmp_path, "192.0.2.1:9559", "--insecure", "--connect-timeout", "1")
    assert done.returncode == 1 and "cannot be reached" in done.stdout


def test_tls_options_without_a_ca_are_refused(tmp_path, pki) -> None:
    done = _controller(tmp_path, "127.0.0.1:1", "--tls-cert", str(pki["controller"].cert))
    assert done.returncode == 2 and "need --tls-ca" in done.stdout


def test_the_embedded_switch_refuses_plain_text_off_loopback() -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "dataplane",
        "switch",
        "--grpc-addr",
        f"0.0.0.0:{port}",
        "--log-level",
        "warning",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert (
        done.returncode == 2
        and "plain-text P4Runtime is allowed only on a loopback" in done.stderr
        and "Traceback" not in done.stderr
    )
    process = subprocess.Popen(
        [*command, "--insecure"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(f"127.0.0.1:{port}", process)
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_embedded_switch_names_a_missing_key_file(tmp_path, pki) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dataplane",
            "switch",
            "--grpc-addr",
            f"127.0.0.1:{free_port()}",
            "--grpc-server-ssl",
            "--grpc-server-cert",
            str(pki["switch"].cert),
            "--grpc-server-key",
            str(tmp_path / "nope.key"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "--grpc-server-key" in done.stderr and "nope.key" in done.stderr


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:9559", True),
        ("127.3.2.1:1", True),
        ("[::1]:9559", True),
        ("localhost:9559", True),
        ("0.0.0.0:9559", False),
        ("10.0.0.1:9559", False),
        ("[::]:9559", False),
        ("switch1:9559", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_a_second_switch_on_an_address_in_use_exits_naming_it() -> None:
    """gRPC binds with SO_REUSEPORT by default: two switches on one address would silently
    share the controllers' connections (and P4Runtime sessions). The second must refuse."""
    address = f"127.0.0.1:{free_port()}"
    command = embedded_command(address)
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(address, first)
        second = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, "GRPC_VERBOSITY": "NONE"},
        )
        assert second.returncode == 1
        assert f"cannot listen on {address}" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.terminate()
        first.wait(timeout=10)
