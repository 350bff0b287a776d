"""docs/openapi.json is what a running controller serves at /openapi.json (regenerate it
with `make openapi`), and the documents that name it link to it."""

from __future__ import annotations

import http.client
import json

from conftest import ROOT, running_api

from controller.service import openapi

COMMITTED = ROOT / "docs" / "openapi.json"


def test_the_committed_schema_is_what_the_api_serves(tmp_path):
    with running_api(tmp_path, None) as running:
        host, port = running["address"].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("GET", "/openapi.json")
        served = json.loads(conn.getresponse().read())
        conn.close()
    committed = json.loads(COMMITTED.read_text())
    assert committed == served, "docs/openapi.json is stale: run `make openapi`"
    assert COMMITTED.read_text() == openapi.text()  # as the generator writes it
    assert "/jobs/{job_id}/counters" in committed["paths"]


def test_the_api_documents_link_the_schema():
    for doc in ("README.md", "docs/jobs-api.md"):
        assert "openapi.json)" in (ROOT / doc).read_text(), doc
