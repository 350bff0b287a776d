"""The northbound API of `ina controller --api HOST:PORT`: jobs, topology, health, metrics,
and at `/` a status page (`status.html`: the topology with each job's paths, updated live).

FastAPI on uvicorn. It is asyncio, so it runs in the daemon's own event loop beside the
P4Runtime channels and a handler reads the session without threads or locks of its own; its
requests and answers are the pydantic models of `controller.service.job_model`, which it
validates and publishes as OpenAPI (`/openapi.json`, browsable at `/docs`). aiohttp would
need a separate schema library for the same.

Off unless `--api` is given: a primary and a backup controller on one machine would otherwise
contend for one default port, and a listening port nobody asked for is one more way in. Bound
to loopback, mutating calls (POST, DELETE) need a bearer token only if `--api-token-file` is
given; bound to anything else the token is required (`listen` refuses to start without one).
With `--api-cert` and `--api-key` it serves HTTPS only (`ApiTLS`).
Every error is a 4xx with a one-line `detail`: bad JSON (400), a body that does not follow the
schema (422, naming the field), a body over `MAX_BODY` or without a length (413, 411), no or a
wrong token (401), an unknown job (404), counters from a host that is not the job's agent
(422); a refused job is 409 (422 for a host or scheme the controller does not know) with the
reason, and nothing installed changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from controller.compiler.program import Layout
from controller.model.inputs import plain_error
from controller.model.network import Network
from controller.model.tiers import layout
from controller.service.admission import Refused, initial_layout
from controller.service.job_model import (
    AgentReport,
    AgentRows,
    JobRequest,
    JobView,
    Problem,
    Refusal,
    Removal,
)
from controller.service.metrics import exposition
from controller.southbound.p4runtime import COUNTERS
from dataplane.tls import TLSConfigError, read_pem

if TYPE_CHECKING:
    from controller.service.daemon import Session
    from controller.service.jobs import JobService

STATUS_PAGE = Path(__file__).with_name("status.html")
MAX_BODY = 64 * 1024  # bytes: a job is a few hundred; a 4096-worker list about 40 kB


class ApiConfigError(ValueError):
    """`--api`, `--api-token-file`, `--api-cert` or `--api-key` cannot be used; the message
    says why."""


@dataclass(frozen=True)
class ApiTLS:
    """HTTPS for the API: the certificate the controller presents (issued for the API's
    address, PEM, its chain after it) and its private key. A client checks it against the CA
    that signed it (`ina job --ca`); the bearer token still says who may change jobs."""

    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        """A server context with the pair loaded; ApiConfigError naming a bad file."""
        for option, path in (("--api-cert", self.cert), ("--api-key", self.key)):
            try:
                read_pem(path, option)
            except TLSConfigError as exc:
                raise ApiConfigError(str(exc)) from None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert, self.key)
        except ssl.SSLError as exc:
            raise ApiConfigError(
                f"--api-cert {self.cert} and --api-key {self.key}: not a "
                f"certificate and its key ({exc.reason or exc})"
            ) from None
        return context


def api_tls(cert: Path | None, key: Path | None) -> ApiTLS | None:
    """The API's TLS from `--api-cert` and `--api-key` (both or neither), checked now."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ApiConfigError(
            "--api-cert and --api-key go together (the API's certificate and its private key, PEM)"
        )
    tls = ApiTLS(Path(cert), Path(key))
    tls.context()
    return tls


def build_app(service: JobService, token: str | None) -> FastAPI:
    app = FastAPI(
        title="INA controller",
        version="1",
        description="Submit and end training jobs; read the topology, health and "
        "the switches' counters.",
    )
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": Problem},
        409: {"model": Refusal},
        413: {"model": Problem},
        422: {"model": Refusal},
        503: {"model": Refusal},
    }

    def authorized(authorization: str | None = Header(default=None)) -> None:
        if token is None:
            return
        given = (authorization or "").removeprefix("Bearer ").strip().encode()
        if not (authorization or "").startswith("Bearer ") or not hmac.compare_digest(
            given, token.encode()
        ):
            raise HTTPException(
                401,
                "this call needs the controller's bearer token "
                "(Authorization: Bearer <token of --api-token-file>)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def job_named(job_id: int) -> str:
        job = service.ids().get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id} runs (GET /jobs lists the jobs)")
        return job

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        if err["type"] == "json_invalid":
            return JSONResponse(
                {
                    "detail": f"the body is not valid JSON "
                    f"({err.get('ctx', {}).get('error', 'syntax')})"
                },
                400,
            )
        where = ".".join(str(p) for p in err["loc"] if p != "body") or "the body"
        more = f" (and {len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
        return JSONResponse({"detail": f"{where}: {plain_error(err)}{more}"}, 422)

    @app.exception_handler(Refused)
    async def _refused(_request: Request, exc: Refused) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "reason": exc.reason}, exc.status)

    @app.exception_handler(Exception)
    async def _failed(_request: Request, exc: Exception) -> JSONResponse:
        # A bug, not the client's fault: the log has the traceback, the client one line.
        first = str(exc).splitlines()[0] if str(exc) else ""
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}: {first}"}, 500)

    @app.post(
        "/jobs",
        status_code=201,
        response_model=JobView,
        responses=errors,
        dependencies=[Depends(authorized)],
    )
    async def submit(request: JobRequest) -> JobView:
        """Admit a job in what the running jobs leave, install it, read it back."""
        return await service.submit(request)

    @app.get("/jobs", response_model=list[JobView])
    async def jobs() -> list[JobView]:
        return [service.view(job) for _, job in sorted(service.ids().items())]

    @app.get("/jobs/{job_id}", response_model=JobView, responses={404: {"model": Problem}})
    async def job(job_id: int) -> JobView:
        return service.view(job_named(job_id))

    def rows(job_id: int, name: str) -> AgentRows:
        return AgentRows(
            version=service.session.version,
            job_id=job_id,
            name=name,
            workers=[a for a in service.session.assignments if a.job_id == job_id],
        )

    @app.get("/jobs/{job_id}/agents", response_model=AgentRows, responses={404: {"model": Problem}})
    async def agents(job_id: int) -> AgentRows:
        """The job's rows for its agents: 404 until the job is installed (agents wait)."""
        return rows(job_id, job_named(job_id))

    @app.get(
        "/jobs/by-name/{name}/agents", response_model=AgentRows, responses={404: {"model": Problem}}
    )
    async def agents_named(name: str) -> AgentRows:
        """The rows of the job submitted as `name`, whatever id it was given: a scheduler
        can start the agents before it submits the job."""
        ids = {job: job_id for job_id, job in service.ids().items()}
        if name not in ids:
            raise HTTPException(404, f"no job named {name!r} runs (GET /jobs lists the jobs)")
        return rows(ids[name], name)

    @app.delete(
        "/jobs/{job_id}",
        response_model=Removal,
        responses={**errors, 404: {"model": Problem}},
        dependencies=[Depends(authorized)],
    )
    async def end(job_id: int) -> Removal:
        """Delete the job's entries from every switch and read them back."""
        return await service.delete(job_named(job_id))

    @app.post(
        "/jobs/{job_id}/counters",
        status_code=204,
        response_class=Response,
        responses={**errors, 404: {"model": Problem}},
        dependencies=[Depends(authorized)],
    )
    async def counters(job_id: int, report: AgentReport) -> None:
        """An agent's counters (`ina worker|ps --api`, every second and at exit): the job's
        view, its metrics and the status page show them summed and per agent."""
        service.report(job_named(job_id), report)

    @app.get("/topology")
    async def topology() -> dict[str, Any]:
        return topology_view(service)

    @app.get("/healthz", responses={503: {"description": "a switch does not hold the plan"}})
    async def healthz() -> JSONResponse:
        switches = {n: d.programmed for n, d in service.session.drivers.items()}
        ok = all(switches.values())
        return JSONResponse(
            {
                "status": "ok" if ok else "degraded",
                "plan_version": service.session.version,
                "switches": switches,
            },
            200 if ok else 503,
        )

    @app.get("/switches")
    async def switches() -> dict[str, Any]:
        """Per switch: whether it holds the plan, and each INA counter summed over its cells."""
        return switches_view(service)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def status_page() -> HTMLResponse:
        return HTMLResponse(STATUS_PAGE.read_text(encoding="utf-8"))

    @app.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        return Response(exposition(service), media_type="text/plain; version=0.0.4")

    return app


def topology_view(service: JobService) -> dict[str, Any]:
    session = service.session
    net = session.network
    return {
        "name": net.name,
        "hosts": [{"name": h, "role": net.role(h)} for h in net.hosts],
        "switches": [
            {
                "name": s,
                "ina": net.is_ina(s),
                "pipelines": net.pipelines(s),
                "tier": net.switch_spec(s).tier,
                "aggregation_capacity_gbps": net.switch_spec(s).aggregation_capacity_gbps,
            }
            for s in net.switches
        ],
        "links": [
            {"from": u, "to": v, "capacity_gbps": d["capacity_gbps"]}
            for u, v, d in net.graph.edges(data=True)
        ],
        "dead_links": sorted(session.dead_links),
        "failed_switches": sorted(session.failed_switches),
        "positions": layout(net),  # node -> (x in 0..1, tier row): as `ina show` draws it
    }


def switches_view(service: JobService) -> dict[str, Any]:
    session = service.session
    return {
        name: {
            "programmed": driver.programmed,
            "connected": driver.switch.is_up,
            "counters": {c: sum(session.counters.get(name, {}).get(c, [])) for c in COUNTERS},
        }
        for name, driver in sorted(session.drivers.items())
    }


class BodyLimit:
    """ASGI middleware: a request body must state its length (no chunked upload) and stay
    within `limit` bytes; refused before the application reads a byte of it."""

    def __init__(self, app: Any, limit: int = MAX_BODY):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            if length is None:
                return await _reply(send, 411, "the body must come with a Content-Length")
            if not length.isdigit() or int(length) > self.limit:
                return await _reply(send, 413, f"the body is over {self.limit} bytes")
        await self.app(scope, receive, send)


async def _reply(send: Any, status: int, detail: str) -> None:
    body = JSONResponse({"detail": detail}).body
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def listen(address: str, token: str | None) -> socket.socket:
    """A listening socket for `--api HOST:PORT`, or `--api PORT` on 127.0.0.1 (port 0: any
    free port); ApiConfigError for a malformed address, one that cannot be bound, or a
    non-loopback one without a token."""
    host, _, port = address.rpartition(":") if not address.isdigit() else ("127.0.0.1", "", address)
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ApiConfigError(
            f"--api {address!r}: expected HOST:PORT or PORT (on 127.0.0.1), e.g. 127.0.0.1:8080"
        )
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ApiConfigError(f"--api {address!r}: cannot resolve {host} ({exc})") from None
    family, _, _, _, where = infos[0]
    if not ipaddress.ip_address(where[0]).is_loopback and token is None:
        raise ApiConfigError(
            f"--api {address}: a mutating call from the network needs a "
            "bearer token; give --api-token-file FILE, or bind to 127.0.0.1"
        )
    try:
        return socket.create_server(where[:2], family=family)
    except OSError as exc:
        raise ApiConfigError(
            f"--api {address}: cannot listen there ({exc.strerror or exc})"
        ) from None


def read_token(path: str) -> str:
    try:
        token = open(path, encoding="utf-8").read().strip()  # noqa: SIM115 (read at once)
    except (OSError, UnicodeDecodeError) as exc:
        raise ApiConfigError(f"--api-token-file {path}: cannot read it ({exc})") from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise ApiConfigError(
            f"--api-token-file {path}: the token must be one word of at "
            "least 16 characters (e.g. `openssl rand -hex 32 > FILE`)"
        )
    return token


class _Server(uvicorn.Server):
    """uvicorn inside the daemon's loop: the daemon handles SIGTERM and SIGINT itself."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


class ApiServer:
    """Serves `app` on `sock` (over TLS with `tls`) until cancelled, then closes it
    gracefully."""

    def __init__(self, app: Any, sock: socket.socket, tls: ApiTLS | None = None):
        self.app, self.sock, self.tls = BodyLimit(app), sock, tls
        host, port = sock.getsockname()[:2]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.url = f"{'https' if tls else 'http'}://{self.address}"

    async def serve(self) -> None:
        server = _Server(
            uvicorn.Config(
                self.app,
                lifespan="off",
                log_config=None,
                access_log=False,
                log_level="warning",
                ssl_certfile=str(self.tls.cert) if self.tls else None,
                ssl_keyfile=str(self.tls.key) if self.tls else None,
            )
        )
        task = asyncio.create_task(server.serve(sockets=[self.sock]))
        try:
            await asyncio.shield(task)
        finally:
            server.should_exit = True
            await task


def prepare(
    address: str, token_file: str | None, network: Network, slots: int
) -> tuple[socket.socket, str | None, Layout]:
    """Before the daemon starts: the token, the listening socket and the topology jobs' ids
    (each with `slots` slots); ApiConfigError if any cannot be had."""
    token = read_token(token_file) if token_file else None
    try:
        layout = initial_layout(network, slots)
    except Refused as exc:
        raise ApiConfigError(
            f"--job-slots {slots}: the topology's jobs do not fit: {exc}"
        ) from None
    return listen(address, token), token, layout


def attach(
    session: Session,
    sock: socket.socket,
    token: str | None,
    *,
    scheme: str,
    time_limit: float | None,
    seed: int | None,
    tls: ApiTLS | None = None,
) -> None:
    """Give the session its job service and the API (HTTPS with `tls`), served once the
    first plan is in."""
    from controller.service.jobs import JobService

    service = JobService(session, scheme, time_limit, seed)
    session.jobs = service
    server = ApiServer(build_app(service, token), sock, tls)
    session.api_server, session.api_address = server, server.address
    session.api_url = server.url
