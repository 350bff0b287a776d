"""The status page (`GET /`) in a real browser: headless Chromium loads it from a daemon
programming embedded switches, runs its JavaScript against the JSON endpoints, and the job
table (with the counters its agents report) and the drawing show a job submitted through the
API (and not before)."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from conftest import API_SWITCHES, running_api
from matplotlib.image import imread

pytestmark = pytest.mark.chromium

WINDOW = (1100, 900)


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    with running_api(tmp_path_factory.mktemp("status"), None) as running:
        yield running


def _call(address: str, method: str, path: str, body=None) -> tuple[int, object]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request(
        method,
        path,
        body=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    answer = conn.getresponse()
    text, kind = answer.read(), answer.getheader("Content-Type", "")
    conn.close()
    return answer.status, json.loads(text) if "json" in kind else text.decode()


def _chromium(url: str, tmp: Path, *args: str) -> str:
    """Run headless Chromium on `url` with `args`; its stdout. Fails (never skips) without
    Chromium: CI installs it (Makefile APT_PACKAGES); deselect with -m 'not chromium'.
    Without its sandbox: root has none, nor a container without user namespaces, and the
    page is our own."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail(
            "Chromium is not installed: `apt-get install chromium` (make apt), or "
            "deselect these tests with -m 'not chromium'"
        )
    run = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={tmp / 'profile'}",
            "--virtual-time-budget=4000",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def _pixels_of(png: Path, colour: str) -> int:
    """Pixels of the screenshot within a small distance of `colour` (#rrggbb)."""
    image = imread(png)[..., :3]
    target = np.array(matplotlib.colors.to_rgb(colour))
    return int((np.abs(image - target).max(axis=-1) < 0.04).sum())


def _job_colour(job_id: int) -> str:
    """matplotlib's tab10 colour of a job id, as `ina show` colours plans."""
    return matplotlib.colors.to_hex(matplotlib.colormaps["tab10"]((job_id - 1) % 10))


def test_the_page_shows_a_job_submitted_through_the_api(controller, tmp_path):
    address = controller["address"]
    url = f"http://{address}/"
    status, page = _call(address, "GET", "/")
    assert status == 200 and "<svg" in page
    before = tmp_path / "before.png"
    _chromium(url, tmp_path, f"--screenshot={before}")

    status, job = _call(
        address, "POST", "/jobs", {"name": "shown", "workers": ["H02", "H20", "H21"], "ps": "H11"}
    )
    assert status == 201, job
    report = {
        "role": "worker",
        "host": "H02",
        "run": "r1",
        "aggregations": 17,
        "collisions": 5,
        "losses": {"timed_out": 2, "detected": 1},
        "resends": {"control": 5, "timeout": 2},
    }
    assert _call(address, "POST", f"/jobs/{job['id']}/counters", report)[0] == 204
    dom = _chromium(url, tmp_path, "--dump-dom")
    row = dom[dom.index(f'id="job-{job["id"]}"') :]
    row = row[: row.index("</tr>")]
    assert ">shown<" in row and ">H11<" in row and "H02, H20, H21" in row
    counted = '<td class="n">17</td><td class="n">5</td><td class="n" title="timed_out 2, '
    assert counted in row and '">3</td>' in row and '">7</td>' in row  # losses, resends
    assert 'id="job-1"' in dom  # the topology file's job A is listed too
    assert all(f'id="switch-{s}"' in dom for s in API_SWITCHES)
    assert '<div id="error"></div>' in dom  # every JSON endpoint answered
    after = tmp_path / "after.png"
    _chromium(url, tmp_path, f"--screenshot={after}")

    image = imread(after)[..., :3]
    assert image.shape[:2] == (WINDOW[1], WINDOW[0])
    assert (image.min(axis=-1) < 0.9).mean() > 0.01, "the screenshot is blank"
    mine, theirs = _job_colour(job["id"]), _job_colour(1)
    assert _pixels_of(before, mine) < 20 <= _pixels_of(before, theirs)  # only A drawn before
    assert _pixels_of(after, mine) > 200  # B's paths and aggregation rings drawn after
    assert _call(address, "DELETE", f"/jobs/{job['id']}")[0] == 200


def test_the_page_reads_positions_and_switch_counters(controller):
    address = controller["address"]
    topology = _call(address, "GET", "/topology")[1]
    positions = topology["positions"]
    assert set(positions) == {h["name"] for h in topology["hosts"]} | set(API_SWITCHES)
    assert positions["S0"][1] > positions["L0"][1] > positions["H00"][1] == 0  # tiers
    switches = _call(address, "GET", "/switches")[1]
    assert set(switches) == set(API_SWITCHES)
    assert all(
        s["programmed"] and set(s["counters"]) >= {"collisions", "forged"}
        for s in switches.values()
    )
