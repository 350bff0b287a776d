"""The API over HTTPS (`--api-cert`, `--api-key`): a real TLS client (the standard library's
ssl) trusting a test CA gets answers and submits a job; a client that does not trust the CA,
and plain HTTP, get none; `ina job` follows the state file's https URL; bad options are one
line and exit 2."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys

import pytest
import yaml
from certs import CA
from conftest import cluster_doc, free_port, running_api

from controller.service import api

TOKEN = "tls-token-0123456789abcdef"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    ca, other = CA(folder / "ca"), CA(folder / "other", "another CA")
    return {
        "ca": ca.path,
        "other": other.path,
        "api": ca.issue("api", server=True, hosts=("127.0.0.1", "localhost")),
    }


@pytest.fixture(scope="module")
def controller(tmp_path_factory, pki):
    tls = api.api_tls(pki["api"].cert, pki["api"].key)
    with running_api(tmp_path_factory.mktemp("tls"), TOKEN, tls=tls) as running:
        yield running


def _https(address: str, cafile, method: str, path: str, body=None) -> tuple[int, dict]:
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(cafile))
    conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=60)
    conn.request(
        method,
        path,
        body=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    answer = conn.getresponse()
    status, text = answer.status, answer.read()
    peer = conn.sock.getpeercert()
    conn.close()
    assert dict(x[0] for x in peer["subject"])["commonName"] == "api"
    return status, json.loads(text)


def test_a_tls_client_trusting_the_ca_is_served_and_submits_a_job(controller, pki):
    address = controller["address"]
    status, health = _https(address, pki["ca"], "GET", "/healthz")
    assert status in (200, 503) and health["plan_version"] >= 1
    status, job = _https(
        address,
        pki["ca"],
        "POST",
        "/jobs",
        {"name": "secure", "workers": ["H02", "H20"], "ps": "H11"},
    )
    assert status == 201, job
    assert _https(address, pki["ca"], "GET", f"/jobs/{job['id']}")[1]["name"] == "secure"
    state = json.loads(controller["state"].read_text())
    assert state["api"]["url"] == f"https://{address}"
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "job",
            "list",
            "--state",
            str(controller["state"]),
            "--ca",
            str(pki["ca"]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0 and "secure" in listed.stdout, listed.stderr
    distrust = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "job",
            "list",
            "--api",
            f"https://{address}",
            "--ca",
            str(pki["other"]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert distrust.returncode == 2 and "does not verify" in distrust.stdout + distrust.stderr
    assert _https(address, pki["ca"], "DELETE", f"/jobs/{job['id']}")[0] == 200


def test_a_client_that_does_not_trust_the_ca_and_plain_http_get_nothing(controller, pki):
    address = controller["address"]
    with pytest.raises(ssl.SSLCertVerificationError):
        _https(address, pki["other"], "GET", "/jobs")
    host, port = address.rsplit(":", 1)
    plain = http.client.HTTPConnection(host, int(port), timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        plain.request("GET", "/jobs")
        answer = plain.getresponse()
        assert answer.status >= 400  # uvicorn may answer 400 to plain HTTP on a TLS port
        raise ConnectionError(answer.status)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--api-cert", "{cert}"], "--api-cert and --api-key go together"),
        (["--api-cert", "{cert}", "--api-key", "{cert}"], "not a certificate and its key"),
        (["--api-cert", "{missing}", "--api-key", "{key}"], "cannot read it"),
    ],
)
def test_bad_api_tls_options_are_one_line_and_exit_2(tmp_path, pki, options, message):
    topology = tmp_path / "t.yaml"
    topology.write_text(yaml.safe_dump(cluster_doc()))
    switches = tmp_path / "switches.json"
    switches.write_text(json.dumps({"L0": {"address": f"127.0.0.1:{free_port()}"}}))
    names = {"cert": pki["api"].cert, "key": pki["api"].key, "missing": tmp_path / "none.pem"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "controller",
            str(topology),
            "--switches",
            str(switches),
            "--state",
            str(tmp_path / "state.json"),
            "--connect-timeout",
            "1",
            "--api",
            "127.0.0.1:0",
            *(o.format(**names) for o in options),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and message in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
