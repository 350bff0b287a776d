"""The controller's HTTP API as the agents read it: a job's rows by its job id.

What the state file gives an agent on the controller's machine, `GET /jobs/{id}/agents` gives
one anywhere: the plan version and the job's rows (a worker assignment each, the state file's
`workers` rows); or by the name it is submitted with, which a scheduler knows before the
controller gives the job its id. A job the controller has not installed yet (404) or a
controller not up yet is waited for, not an error: a scheduler may start a job's agents
before or while it submits the job. The controller answers the rows only once every switch
holds the job's entries, so an agent that has them may send. Standard library only (urllib):
dataplane/ does not import controller/.

An agent reports its counters back (`CounterReporter`): `POST /jobs/{id}/counters` every
second from a thread and once more at exit, cumulative since the agent started, so a report
lost on the way loses nothing.
"""

from __future__ import annotations

import json
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

POLL = 0.5  # seconds between two reads of the job's rows, waiting or following the plan
REPORT_EVERY = 1.0  # seconds between two reports of an agent's counters


class ApiError(Exception):
    """An answer that waiting will not change (bad URL, id, certificate), or the wait is over;
    the message says which."""


def _context(url: str, ca: str | None) -> ssl.SSLContext | None:
    if not url.startswith("https://"):
        return None
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ApiError(f"--api-ca {ca}: not a readable CA certificate ({exc})") from None


def job_rows(
    url: str, job: int | str, *, ca: str | None = None, timeout: float = 5.0
) -> dict | None:
    """`{"version", "job_id", "name", "workers"}` of job `job` (its id, or the name it is
    submitted with) from the API at `url` (http[s]://HOST:PORT); None while the job is not
    installed or the API does not answer."""
    if not url.startswith(("http://", "https://")):
        raise ApiError(f"--api {url!r}: expected http://HOST:PORT or https://HOST:PORT")
    where = (
        f"jobs/{job}"
        if isinstance(job, int)
        else f"jobs/by-name/{urllib.parse.quote(job, safe='')}"
    )
    try:
        with urllib.request.urlopen(
            f"{url.rstrip('/')}/{where}/agents", timeout=timeout, context=_context(url, ca)
        ) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404 or exc.code >= 500:
            return None
        raise ApiError(
            f"the API at {url} refuses job {job}'s rows: HTTP {exc.code} {_detail(exc)}"
        ) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            raise ApiError(
                f"the API at {url} shows a certificate that does not verify "
                f"({exc.reason.verify_message}); give --api-ca with the CA that "
                "signed it"
            ) from None
        return None
    except (OSError, ValueError):
        return None


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("detail", exc.reason))
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


def wait_for_job(
    url: str,
    job: int | str,
    *,
    wait: float,
    ca: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    """Job `job`'s rows once the controller has installed it; ApiError after `wait` s."""
    deadline = clock() + wait
    while True:
        rows = job_rows(url, job, ca=ca)
        if rows is not None:
            return rows
        if clock() >= deadline:
            raise ApiError(
                f"job {job} is not installed at {url} after {wait:g} s (submit it "
                "with POST /jobs or `ina job submit`, or wait longer with "
                "--api-wait)"
            )
        sleep(POLL)


class ApiWatcher:
    """`state.PlanWatcher` over the API: the row `match` picks of a newer plan version.

    A thread reads the job's rows every `POLL` s, so `poll`, called from an agent's send or
    receive loop, never waits on the network."""

    def __init__(self, url: str, job: int, match: Callable[[dict], bool], ca: str | None = None):
        self.url, self.job, self.match, self.ca = url, job, match, ca
        self.version = 0
        self._latest: dict | None = None
        self._thread = threading.Thread(target=self._follow, daemon=True, name=f"api-job-{job}")
        self._thread.start()

    def _follow(self) -> None:
        while True:
            try:
                rows = job_rows(self.url, self.job, ca=self.ca, timeout=2.0)
            except ApiError:
                rows = None
            if rows is not None:
                self._latest = rows
            time.sleep(POLL)

    def poll(self, now: float) -> dict | None:
        """The matching row of a newer plan version than the last one taken; else None."""
        rows = self._latest
        if rows is None or rows["version"] <= self.version:
            return None
        row = next((r for r in rows["workers"] if self.match(r)), None)
        if row is not None:
            self.version = rows["version"]
        return row


def post_counters(
    url: str,
    job: int,
    body: dict,
    *,
    token: str | None = None,
    ca: str | None = None,
    timeout: float = 5.0,
) -> bool:
    """POST one agent's counters for job `job`; False if the API did not answer (try again
    later), ApiError with the controller's one line if it refused them (a retry will not
    change that: no such job, a wrong token, a body it does not take)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"{url.rstrip('/')}/jobs/{job}/counters",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_context(url, ca)):
            return True
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            return False
        raise ApiError(
            f"the API at {url} refuses job {job}'s counters: HTTP {exc.code} {_detail(exc)}"
        ) from None
    except (OSError, ValueError):
        return False


class CounterReporter:
    """Sends `snapshot()` (an agent's cumulative counters, `AgentReport` in the API's schema
    without `final`) to the API every `every` s from a thread, and once more, final, at
    `close()`. A refusal ends the reports with one line on stderr; the agent goes on."""

    def __init__(
        self,
        url: str,
        job: int,
        snapshot: Callable[[], dict],
        *,
        token: str | None = None,
        ca: str | None = None,
        every: float = REPORT_EVERY,
    ):
        self.url, self.job, self.snapshot = url, job, snapshot
        self.token, self.ca, self.every = token, ca, every
        self.sent = 0  # reports the API took
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"counters-{job}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every) and self.error is None:
            self.send()

    def send(self, final: bool = False) -> bool:
        if self.error is not None:
            return False
        try:
            body = {**self.snapshot(), "final": final}
            taken = post_counters(self.url, self.job, body, token=self.token, ca=self.ca)
        except ApiError as exc:
            self.error = str(exc)
            print(f"warning: counters no longer reported: {exc}", file=sys.stderr, flush=True)
            return False
        self.sent += taken
        return taken

    def close(self) -> bool:
        """Stop the thread and send the final report; whether the API took it."""
        self._stop.set()
        self._thread.join()
        return self.send(final=True)
