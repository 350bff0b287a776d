"""`ina job submit|list|show|delete`: the command line over the controller's HTTP API.

A thin client on the standard library's urllib: the API (`controller.service.api`) decides
everything, this only builds the request and prints the answer. The API's address is
`--api HOST:PORT`, else the one the controller wrote into its state file (`--state`, the
controller's default), so `ina controller --api 127.0.0.1:0` needs no port chosen by hand.
An API served over HTTPS (`--api-cert`) is `--api https://HOST:PORT` (the state file says
so), its certificate checked against `--ca` or the system's CAs.
A refused job exits 1 with the controller's reason; a request the API rejects (unknown host,
unknown id, bad token) and bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any

from controller.tools.arguments import UserError

DEFAULT_STATE = "out/controller/state.json"


class ApiRefusal(Exception):
    """The controller answered with an error: its status and one-line reason."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "job",
        help="submit, list, show and end jobs on a running controller (`ina controller --api`)",
    )
    jobs = p.add_subparsers(dest="job_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--api",
        metavar="[https://]HOST:PORT",
        help="the controller's API (default: the address in --state)",
    )
    common.add_argument(
        "--ca",
        metavar="PEM",
        help="the CA that signed the API's certificate (HTTPS; default: the system's CAs)",
    )
    common.add_argument(
        "--state",
        default=DEFAULT_STATE,
        help=f"the controller's state file (default {DEFAULT_STATE})",
    )
    common.add_argument(
        "--token-file", metavar="FILE", help="the bearer token (the controller's --api-token-file)"
    )
    common.add_argument("--json", action="store_true", help="print the answer as JSON")

    s = jobs.add_parser("submit", parents=[common], help="admit a job, or hear why not")
    s.add_argument(
        "--workers",
        required=True,
        metavar="H1,H2,...|N",
        help="worker hosts (fixed placement) or, with --placement free, how many",
    )
    s.add_argument("--ps", metavar="HOST", help="the PS host (fixed placement)")
    s.add_argument(
        "--placement",
        choices=["fixed", "free"],
        default="fixed",
        help="fixed: the hosts given (default); free: the controller places the "
        "PS and --workers N workers on free servers (scheme paring)",
    )
    s.add_argument("--name", help="a name unique among running jobs (default job<ID>)")
    s.add_argument("--scheme", help="routing scheme (default: the controller's)")
    s.add_argument(
        "--gradient-mb",
        type=float,
        metavar="M",
        help="gradient size per worker: adds the communication time",
    )
    s.add_argument(
        "--priority", type=float, metavar="BETA", help="weight in joint re-plans (default 1)"
    )
    s.add_argument(
        "--min-rate",
        type=float,
        metavar="GBPS",
        help="refuse unless the job gets at least this rate",
    )
    s.add_argument("--slots", type=int, metavar="N", help="aggregation slots per pipeline")
    s.set_defaults(func=cmd_submit)

    s = jobs.add_parser("list", parents=[common], help="the running jobs")
    s.set_defaults(func=cmd_list)
    ended = "end a job: its entries removed from every switch and read back"
    for name, func, text in (
        ("show", cmd_show, "one job: plan, ids, slots, counters"),
        ("delete", cmd_delete, ended),
    ):
        s = jobs.add_parser(name, parents=[common], help=text)
        s.add_argument("id", type=int, help="the job's id (`ina job list`)")
        s.set_defaults(func=func)


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON body of `submit`, from the flags given (the API applies the defaults)."""
    body: dict[str, Any] = {"placement": args.placement}
    if args.placement == "free":
        if not args.workers.isdigit():
            raise UserError(f"--placement free takes --workers as a count, got {args.workers!r}")
        body["workers"] = int(args.workers)
    else:
        body["workers"] = [w.strip() for w in args.workers.split(",") if w.strip()]
    for key, value in (
        ("ps", args.ps),
        ("name", args.name),
        ("scheme", args.scheme),
        ("gradient_mb", args.gradient_mb),
        ("priority", args.priority),
        ("min_rate_gbps", args.min_rate),
        ("slots", args.slots),
    ):
        if value is not None:
            body[key] = value
    return body


def call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One API call; the decoded answer, ApiRefusal for an error status, UserError when the
    controller cannot be reached."""
    address = args.api or _address_from_state(args.state)
    url = address if "://" in address else f"http://{address}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if args.token_file:
        try:
            token = open(args.token_file, encoding="utf-8").read().strip()  # noqa: SIM115
        except OSError as exc:
            raise UserError(f"--token-file {args.token_file}: cannot read it ({exc})") from None
        request.add_header("Authorization", f"Bearer {token}")
    try:
        context = ssl.create_default_context(cafile=args.ca) if url.startswith("https") else None
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"--ca {args.ca}: not a readable CA certificate ({exc})") from None
    try:
        with urllib.request.urlopen(request, timeout=120, context=context) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        raise ApiRefusal(exc.code, str(detail)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            raise UserError(
                f"the API at {address} shows a certificate that does not verify "
                f"({reason.verify_message}); give --ca with the CA that signed "
                "it"
            ) from None
        raise UserError(
            f"cannot reach the controller's API at {address} ({reason}); is "
            "`ina controller --api` running?"
        ) from None


def _address_from_state(path: str) -> str:
    try:
        state = json.loads(open(path, encoding="utf-8").read())  # noqa: SIM115
        address = state["api"].get("url") or state["api"]["address"]
    except OSError as exc:
        raise UserError(
            f"{path}: cannot read the controller's state file ({exc.strerror}); "
            "give --api HOST:PORT or --state FILE"
        ) from None
    except (ValueError, KeyError, TypeError):
        raise UserError(
            f"{path}: the state file names no API address (was the controller "
            "started with --api?); give --api HOST:PORT"
        ) from None
    if not isinstance(address, str):
        raise UserError(f"{path}: the state file names no API address; give --api HOST:PORT")
    return address


def _run(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    try:
        return call(args, method, path, body)
    except ApiRefusal as exc:
        # Refused (409) or failed (5xx): 1, as a component failing at run time; any other
        # 4xx is what was asked: 2, as bad input.
        print(f"error: {exc} (HTTP {exc.status})", file=sys.stderr)
        raise SystemExit(1 if exc.status == 409 or exc.status >= 500 else 2) from None


def cmd_submit(args: argparse.Namespace) -> int:
    job = _run(args, "POST", "/jobs", request_body(args))
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    print(f"job {job['id']} ({job['name']}) admitted")
    _print_job(job)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    jobs = _run(args, "GET", "/jobs")
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    print(f"{'id':>3}  {'name':<16} {'source':<8} {'scheme':<10} {'rate (Gbps)':>11}  slots")
    for job in jobs:
        rate = min((t["rate_gbps"] for t in job["tasks"]), default=0.0)
        region = job["slot_region"]
        print(
            f"{job['id']:>3}  {job['name']:<16} {job['source']:<8} {job['scheme']:<10} "
            f"{rate:>11.4g}  {region['base']}-{region['base'] + region['count'] - 1}"
        )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    job = _run(args, "GET", f"/jobs/{args.id}")
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    _print_job(job)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    removal = _run(args, "DELETE", f"/jobs/{args.id}")
    if args.json:
        print(json.dumps(removal, indent=2))
        return 0
    left = sum(removal["left_on_switches"].values())
    print(
        f"job {removal['id']} ({removal['name']}) ended: {removal['deleted_entries']} "
        f"entries deleted, {left} left on the switches (read back)"
    )
    return 0 if left == 0 else 1


def _print_job(job: dict) -> None:
    region = job["slot_region"]
    print(
        f"job {job['id']} {job['name']} ({job['source']}, {job['scheme']}, plan "
        f"{job['plan_status']}), slots {region['base']}-{region['base'] + region['count'] - 1}"
        f" of each generation's {region['region_size']}, flow ids from "
        f"{job['flow_ids']['base']}"
    )
    for task in job["tasks"]:
        points = (
            ", ".join(f"{a['switch']}:{a['pipeline']}x{a['fan_in']}" for a in task["aggregation"])
            or "none"
        )
        print(
            f"  task {task['task']}: PS {task['ps']}, {len(task['paths'])} workers, rate "
            f"{task['rate_gbps']:.4g} Gbps, aggregation {points}"
        )
        for agent in task["agents"]:
            print(
                f"    {agent['worker']}: flow {agent['flow_id']} -> node "
                f"{agent['next_node']}, result flow {agent['result_flow_id']}"
            )
    if job.get("communication_seconds") is not None:
        print(
            f"  communication {job['communication_seconds']:.4g} s per iteration "
            f"({job['gradient_mb']:g} MB)"
        )
    print(f"  forged packets: {job['counters']['forged']}")
    reported = job.get("agent_counters", {})
    if reported.get("agents"):
        total = reported["total"]

        def causes(kind: dict) -> str:
            named = ", ".join(f"{c.replace('_', ' ')} {n}" for c, n in kind.items() if n)
            return f"{sum(kind.values())}" + (f" ({named})" if named else "")

        print(
            f"  {len(reported['agents'])} agents reported: {total['aggregations']} "
            f"aggregations, {total['collisions']} collisions, losses "
            f"{causes(total['losses'])}, resends {causes(total['resends'])}"
        )
