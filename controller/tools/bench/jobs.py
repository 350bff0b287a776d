"""`ina bench jobs`: jobs at run time on a real controller and real embedded switches.

It generates a leaf-spine (`ina topo gen`'s generator), starts one embedded switch process
per switch (`dataplane.targets`, as `ina mininet` does, without interfaces: P4Runtime is all
this needs) and the controller daemon with its API in a process of its own (as `ina controller
--api` runs it, less the link monitor: `serve_controller`), and talks to it over HTTP only.

Cycles: `--cycles` times POST a job, then DELETE it. The POST answers once every switch holds
the job's entries and the controller has read them back, so its latency is the time to
programmed; after every `--check-every`-th cycle (and the last) our own P4Runtime client
(`dataplane.p4rt_client`, not the controller's driver) reads every switch: after the POST the
job's entries are there, after the DELETE every table entry and multicast group is exactly as
before the first cycle, and `GET /jobs` lists the slot regions it listed then. The
controller's resident memory is read (psutil) every check.

Trace: `--jobs` jobs arrive as a Poisson process (`--seed`), each with an exponential lifetime,
random workers and a random PS; at each arrival and departure (in trace order, one change at
a time as the controller makes them) `GET /jobs` records every running job's admitted rate.

Writes `jobs.json`, `jobs-cycles.png` and `jobs-trace.png` into `--out`; progress on stderr.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from controller.model.network import build_network, dump_topology
from controller.model.topogen import InaOptions, Workload, leaf_spine
from controller.solvers import scheme_names
from dataplane.p4rt_client import Client
from dataplane.schema import load_p4info
from dataplane.targets import start_target

LEAVES, SPINES, HOSTS_PER_LEAF = 4, 2, 4
SCHEME = "shortest"  # `ina controller`'s default
JOB_SLOTS = 64  # slots per pipeline of every job: sixteen jobs fit a region
MEAN_GAP_S, MEAN_LIFE_S = 1.0, 8.0  # the trace's mean time between arrivals and lifetime


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "jobs",
        help="jobs at run time: submit/delete cycles read back for leaks, and a "
        "Poisson trace of arrivals with each job's admitted rate",
    )
    p.add_argument(
        "--cycles", type=_count, default=1000, help="submit/delete cycles (default 1000)"
    )
    p.add_argument(
        "--check-every",
        type=_positive,
        default=1,
        metavar="K",
        help="read every switch back after every K-th cycle and the last (default 1)",
    )
    p.add_argument("--jobs", type=_count, default=50, help="jobs in the arrival trace (default 50)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrival trace (default 0)")
    p.add_argument(
        "--scheme",
        default=SCHEME,
        choices=scheme_names(),
        metavar="NAME",
        help=f"the controller's scheme, for the topology's job and every submitted one "
        f"(default {SCHEME}, as `ina controller`'s; `ina schemes` lists them)",
    )
    p.add_argument("--out", default="out/bench/jobs", help="output directory")
    p.set_defaults(func=main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The controller's HTTP API, one connection per call (as a client would)."""

    def __init__(self, address: str):
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            conn.request(
                method,
                path,
                body=None if body is None else json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read() or b"null")
        finally:
            conn.close()


@dataclass
class Fabric:
    """The switch processes, the controller process and our own readers of the switches."""

    api: Api
    controller: psutil.Process
    readers: dict[str, Client]
    hosts: list[str]  # hosts free for API jobs (not in the topology file's job)
    switches: int

    def held(self) -> dict[str, set[bytes]]:
        """Every table entry and multicast group of every switch, read by our own client."""
        from finsy.proto import p4r

        table, group = p4r.Entity(), p4r.Entity()
        table.table_entry.SetInParent()
        group.packet_replication_engine_entry.multicast_group_entry.SetInParent()
        out = {}
        for name, client in self.readers.items():
            entities = set()
            for entity in client.read(table, group):
                if entity.WhichOneof("entity") == "table_entry":
                    entity.table_entry.ClearField("counter_data")
                entities.add(entity.SerializeToString(deterministic=True))
            out[name] = entities
        return out

    def rss_mb(self) -> float:
        return round(self.controller.memory_info().rss / 2**20, 1)


@contextmanager
def fabric(work: Path, scheme: str = SCHEME) -> Iterator[Fabric]:
    """Switches and controller for the bench's leaf-spine, stopped on the way out."""
    doc = leaf_spine(
        leaves=LEAVES,
        spines=SPINES,
        hosts_per_leaf=HOSTS_PER_LEAF,
        ina=InaOptions(ina=1.0, pipelines=1),
        workload=Workload(workers_per_job=2),
    )
    topology = work / "topology.yaml"
    dump_topology(doc, topology)
    network = build_network(doc)
    addresses = {s: f"127.0.0.1:{_free_port()}" for s in network.switches}
    procs: list[subprocess.Popen] = []
    readers: dict[str, Client] = {}
    controller: multiprocessing.process.BaseProcess | None = None
    try:
        for address in addresses.values():
            procs.append(start_target("embedded", {}, address))
        (work / "switches.json").write_text(
            json.dumps({s: {"address": a, "device_id": 1} for s, a in addresses.items()})
        )
        state = work / "state.json"
        controller = multiprocessing.get_context("spawn").Process(
            target=serve_controller,
            args=(str(topology), addresses, str(state), str(work / "controller.log"), scheme),
            name="ina-bench-jobs-controller",
        )
        controller.start()
        api = _wait_for_api(state, controller, work / "controller.log")
        p4info = load_p4info()
        for name, address in addresses.items():
            readers[name] = Client(address, 1, 1, p4info)  # a backup: election id 1
        busy = {h for t in network.tasks for h in (t.ps, *t.workers)}
        yield Fabric(
            api,
            psutil.Process(controller.pid),
            readers,
            [h for h in network.hosts if h not in busy],
            len(addresses),
        )
    finally:
        for client in readers.values():
            client.close()
        if controller is not None and controller.pid is not None:
            controller.terminate()  # SIGTERM: the daemon stops as `ina controller` does
            controller.join(timeout=20)
            if controller.is_alive():
                controller.kill()
                controller.join()
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class BenchError(Exception):
    """The bench cannot go on; the message says why."""


def serve_controller(
    topology: str, addresses: dict[str, str], state: str, log: str, scheme: str
) -> None:
    """The controller process: what `ina controller TOPOLOGY --switches FILE --api
    127.0.0.1:0 --job-slots JOB_SLOTS --scheme SCHEME` runs, without its link monitor. The
    switches have no interfaces for its probes to cross, so it would take every link for dead
    and plan around them; this bench measures jobs, not links."""
    import asyncio
    import logging

    from controller.model.network import load_topology
    from controller.service import api, daemon
    from controller.solvers import solve
    from controller.southbound.p4runtime import SwitchTarget

    logging.basicConfig(filename=log, level=logging.WARNING)
    network = load_topology(topology)
    sock, token, layout = api.prepare("127.0.0.1:0", None, network, JOB_SLOTS)
    session = daemon.Session(
        network,
        solve(network, scheme),
        {n: SwitchTarget(n, a) for n, a in addresses.items()},
        Path(state),
        layout=layout,
    )
    api.attach(session, sock, token, scheme=scheme, time_limit=None, seed=0)
    asyncio.run(daemon.run(session, connect_timeout=60, probe_interval=None))


def _wait_for_api(state: Path, controller: multiprocessing.process.BaseProcess, log: Path) -> Api:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not controller.is_alive():
            raise BenchError(
                f"the controller exited ({controller.exitcode}): "
                + " ".join((log.read_text() if log.exists() else "").split())[-400:]
            )
        try:
            address = json.loads(state.read_text())["api"]["address"]
            api = Api(address)
            if api.call("GET", "/healthz")[0] == 200:
                return api
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.2)
    raise BenchError("the controller's API did not answer within 120 s")


def _slot_regions(api: Api) -> list[tuple[str, int, int]]:
    status, jobs = api.call("GET", "/jobs")
    assert status == 200 and isinstance(jobs, list)
    return sorted((j["name"], j["slot_region"]["base"], j["slot_region"]["count"]) for j in jobs)


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p99": None, "max": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "median": round(statistics.median(ordered), 4),
        "p99": round(p99, 4),
        "max": round(ordered[-1], 4),
    }


def cycles(fab: Fabric, count: int, every: int) -> dict:
    """`count` submit/delete cycles of one job, read back every `every` cycles and last."""
    api = fab.api
    baseline, regions = fab.held(), _slot_regions(api)
    body = {"name": "cycle", "workers": fab.hosts[1:3], "ps": fab.hosts[0], "slots": JOB_SLOTS}
    rows: list[dict] = []
    rss = [{"cycle": 0, "rss_mb": fab.rss_mb()}]
    leaks = {"entities": 0, "slot_regions": 0, "left_reported": 0}
    failures: list[str] = []
    started = time.monotonic()
    for i in range(1, count + 1):
        check = i % every == 0 or i == count
        t0 = time.perf_counter()
        status, job = api.call("POST", "/jobs", body)
        post = time.perf_counter() - t0
        if status != 201 or not isinstance(job, dict):
            failures.append(f"cycle {i}: POST answered {status}: {job}")
            break
        row: dict = {"cycle": i, "job_id": job["id"], "post_s": round(post, 4)}
        row["entries_answered"] = sum(job["entries"].values())
        if check:
            held = fab.held()
            row["entities_added"] = sum(len(held[s] - baseline[s]) for s in held)
            row["entities_missing"] = sum(len(baseline[s] - held[s]) for s in held)
        t0 = time.perf_counter()
        status, removal = api.call("DELETE", f"/jobs/{job['id']}")
        row["delete_s"] = round(time.perf_counter() - t0, 4)
        if status != 200 or not isinstance(removal, dict):
            failures.append(f"cycle {i}: DELETE answered {status}: {removal}")
            break
        leaks["left_reported"] += sum(removal["left_on_switches"].values())
        if check:
            held = fab.held()
            leaked = sum(len(held[s] ^ baseline[s]) for s in held)
            row["leaked_entities"] = leaked
            leaks["entities"] += leaked
            leaks["slot_regions"] += _slot_regions(api) != regions
            rss.append({"cycle": i, "rss_mb": fab.rss_mb()})
        rows.append(row)
        if i % max(1, count // 20) == 0 or i == count:
            _progress(
                f"cycles {i}/{count}: POST median "
                f"{statistics.median(r['post_s'] for r in rows):.3f} s, DELETE median "
                f"{statistics.median(r['delete_s'] for r in rows):.3f} s, leaked "
                f"{leaks['entities']} entities, controller RSS {rss[-1]['rss_mb']} MB, "
                f"{time.monotonic() - started:.0f} s"
            )
    checked = [r for r in rows if "entities_added" in r]
    return {
        "cycles": len(rows),
        "check_every": every,
        "checks": len(checked),
        "failures": failures,
        "post_seconds": _quantiles([r["post_s"] for r in rows]),
        "delete_seconds": _quantiles([r["delete_s"] for r in rows]),
        "entries_per_job": sorted({r["entries_answered"] for r in rows}),
        "entities_per_job_read_back": sorted({r["entities_added"] for r in checked}),
        "entities_missing_while_running": sum(r["entities_missing"] for r in checked),
        "leaks": leaks,
        "rss_mb": {"start": rss[0]["rss_mb"], "end": rss[-1]["rss_mb"], "samples": rss},
        "baseline_entities": sum(len(v) for v in baseline.values()),
        "rows": rows,
    }


def _rates(api: Api) -> dict[str, float]:
    """Every running job's admitted rate (its tasks' summed), as `GET /jobs` answers."""
    status, jobs = api.call("GET", "/jobs")
    if status != 200 or not isinstance(jobs, list):
        raise BenchError(f"GET /jobs answered {status}")
    return {j["name"]: sum(t["rate_gbps"] for t in j["tasks"]) for j in jobs}


def make_trace(jobs: int, hosts: list[str], seed: int) -> list[dict]:
    """`jobs` Poisson arrivals with exponential lifetimes, each with 2-4 random workers and a
    random PS among `hosts`."""
    rng = random.Random(seed)
    now, trace = 0.0, []
    for k in range(jobs):
        now += rng.expovariate(1 / MEAN_GAP_S)
        chosen = rng.sample(hosts, rng.randint(3, 5))
        trace.append(
            {
                "name": f"t{k}",
                "arrival": round(now, 3),
                "lifetime": round(rng.expovariate(1 / MEAN_LIFE_S), 3),
                "ps": chosen[0],
                "workers": chosen[1:],
            }
        )
    return trace


def arrivals(fab: Fabric, trace: list[dict]) -> dict:
    """Replay `trace`: each arrival a POST, each departure of an admitted job a DELETE; after
    each, every running job's rate as `GET /jobs` answers it."""
    api = fab.api
    events = [(j["arrival"], 1, j["name"]) for j in trace]
    events += [(j["arrival"] + j["lifetime"], 0, j["name"]) for j in trace]
    events.sort()
    spec = {j["name"]: j for j in trace}
    admitted: dict[str, int] = {}
    outcome: dict[str, dict] = {}
    samples: list[dict] = [{"t": 0.0, "rates": _rates(api)}]
    for n, (at, arriving, name) in enumerate(events, 1):
        if arriving:
            j = spec[name]
            body = {"name": name, "workers": j["workers"], "ps": j["ps"], "slots": JOB_SLOTS}
            status, answer = api.call("POST", "/jobs", body)
            assert isinstance(answer, dict)
            if status == 201:
                admitted[name] = answer["id"]
                outcome[name] = {"admitted": True, "rate_gbps": answer["tasks"][0]["rate_gbps"]}
            else:
                reason = answer.get("reason") or f"HTTP {status}: {answer.get('detail')}"
                outcome[name] = {"admitted": False, "status": status, "reason": reason}
        elif name in admitted:
            status, _ = api.call("DELETE", f"/jobs/{admitted.pop(name)}")
            if status != 200:
                raise BenchError(f"trace: DELETE of {name} answered {status}")
        rates = _rates(api)
        samples.append({"t": at, "rates": rates})
        if n % max(1, len(events) // 10) == 0 or n == len(events):
            refused = sum(not o["admitted"] for o in outcome.values())
            _progress(
                f"trace {n}/{len(events)} events: {len(rates)} jobs running, "
                f"{len(outcome) - refused} admitted, {refused} refused"
            )
    for name, o in outcome.items():
        o.update(spec[name])
    reasons: dict[str, int] = {}
    for o in outcome.values():
        if not o["admitted"]:
            reasons[o["reason"]] = reasons.get(o["reason"], 0) + 1
    return {
        "jobs": len(trace),
        "mean_gap_s": MEAN_GAP_S,
        "mean_lifetime_s": MEAN_LIFE_S,
        "admitted": sum(o["admitted"] for o in outcome.values()),
        "refused": reasons,
        "max_running": max((len(s["rates"]) for s in samples), default=0),
        "outcomes": outcome,
        "samples": samples,
    }


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: ina bench jobs: --out {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    report: dict = {
        "topology": f"leaf-spine {LEAVES}x{SPINES}, {HOSTS_PER_LEAF} hosts per leaf, all INA",
        "seed": args.seed,
        "scheme": args.scheme,
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="ina-bench-jobs-") as work:
        try:
            with fabric(Path(work), args.scheme) as fab:
                report["switches"] = fab.switches
                _progress(f"{fab.switches} switches and the controller are up")
                report["cycles"] = cycles(fab, args.cycles, args.check_every)
                trace = make_trace(args.jobs, fab.hosts, args.seed)
                report["trace"] = arrivals(fab, trace)
                report["controller_rss_mb_after_trace"] = fab.rss_mb()
        except BenchError as exc:
            print(f"error: ina bench jobs: {exc}", file=sys.stderr)
            return 1
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    written = [out / "jobs.json"]
    written[0].write_text(json.dumps(report, indent=1) + "\n")
    if report["cycles"]["cycles"]:
        written.append(out / "jobs-cycles.png")
        _plot_cycles(report["cycles"], written[-1])
    if report["trace"]["jobs"]:
        written.append(out / "jobs-trace.png")
        _plot_trace(report["trace"], written[-1])
    print(summary(report))
    print(f"results in {', '.join(str(p) for p in written)}")
    bad = report["cycles"]["failures"] or any(report["cycles"]["leaks"].values())
    return 1 if bad else 0


def summary(report: dict) -> str:
    c, t = report["cycles"], report["trace"]
    post, delete = c["post_seconds"], c["delete_seconds"]
    refused = ", ".join(f"{n} {r}" for r, n in sorted(t["refused"].items())) or "none"
    lines = [
        f"{c['cycles']} submit/delete cycles, read back {c['checks']} times: leaked "
        f"{c['leaks']['entities']} entities, {c['leaks']['slot_regions']} slot regions",
    ]
    if c["cycles"]:
        lines += [
            f"  POST to programmed: median {post['median']} s, p99 {post['p99']} s; "
            f"DELETE: median {delete['median']} s, p99 {delete['p99']} s",
            f"  entries per job {c['entries_per_job']}, read back (with groups) "
            f"{c['entities_per_job_read_back']}; controller RSS {c['rss_mb']['start']} -> "
            f"{c['rss_mb']['end']} MB",
        ]
    lines.append(
        f"trace ({report['scheme']}): {t['jobs']} jobs, {t['admitted']} admitted, refused: "
        f"{refused}; at most {t['max_running']} running"
    )
    return "\n".join(lines)


def _plot_cycles(c: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, mem) = plt.subplots(1, 2, figsize=(11, 3.8))
    rows = c["rows"]
    for key, label in (("post_s", "POST (to programmed)"), ("delete_s", "DELETE")):
        lat.plot([r["cycle"] for r in rows], [r[key] for r in rows], ".", ms=2, label=label)
    lat.set_xlabel("cycle")
    lat.set_ylabel("seconds")
    lat.set_yscale("log")
    lat.set_title("latency per submit/delete cycle", fontsize=10)
    lat.legend(fontsize=8)
    lat.grid(alpha=0.3)
    samples = c["rss_mb"]["samples"]
    mem.plot([s["cycle"] for s in samples], [s["rss_mb"] for s in samples])
    mem.set_xlabel("cycle")
    mem.set_ylabel("MB")
    mem.set_ylim(bottom=0)
    mem.set_title(
        f"controller RSS; leaked entities read back: {c['leaks']['entities']}", fontsize=10
    )
    mem.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_trace(t: dict, path: Path) -> None:
    """Each job's admitted rate over trace time, stacked (a step per event)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = t["samples"]
    names = list(dict.fromkeys(n for s in samples for n in s["rates"]))
    fig, ax = plt.subplots(figsize=(11, 4.2))
    if samples:
        times = [s["t"] for s in samples]
        stacks = [[s["rates"].get(n, 0.0) for s in samples] for n in names]
        colours = plt.colormaps["tab20"]
        ax.stackplot(
            times,
            stacks,
            step="post",
            colors=[colours(k % 20) for k in range(len(names))],
            linewidth=0,
        )
        for o in t["outcomes"].values():
            if not o["admitted"]:
                ax.axvline(o["arrival"], color="red", alpha=0.4, lw=0.8)
    ax.set_xlabel("trace time (s): Poisson arrivals, exponential lifetimes")
    ax.set_ylabel("admitted rate, stacked (Gbps)")
    ax.set_title(
        f"{t['jobs']} jobs, {t['admitted']} admitted, "
        f"{sum(t['refused'].values())} refused (red lines)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
