"""`ina mininet`: the closed loop on an emulated network, with real packets.

Builds the topology in Mininet with the classes of controller.emulation.mininet_nodes (hosts in
namespaces, TCLink shaping scaled from the model's Gbps, one switch process per switch: the
embedded target, or bmv2 `simple_switch_grpc` with `--target bmv2`), starts `ina controller` on
them, then runs K iterations of the job: a PS and every worker per iteration, released
together once all are ready, each worker checking the result it receives against the exact
sum. Everything is torn down even on failure.

It lives in the `controller` package so that `ina mininet` works from any directory; the
top-level `mininet/ina.py` (for `mn --custom`) loads the same node classes.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import accumulate, pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from controller.compiler.program import Numbering
from controller.emulation.management import Management, ManagementError
from controller.emulation.subset import plan_nodes
from controller.model.network import Network
from controller.model.plan import Plan, TaskPlan
from dataplane.bmv2 import HOW_TO_GET_BMV2, switch_path
from dataplane.p4build import P4CompileError, compile_for_bmv2

if TYPE_CHECKING:  # imported where used: it needs os-ken
    from controller.southbound.openflow import OvsSwitches

# One model Gbps becomes this many Mbps of TCLink bandwidth: small enough for the switch
# processes on 2 cores (the plan, not the CPU, must be the bottleneck), large enough for quick
# runs. bmv2 running ina.p4 forwards about a tenth of what the embedded target does (BENCHMARKS.md's
# `ina bench target`: ~3,000 vs ~34,000 aggregated fragments/s); at 2 Mbps per Gbps ARO's
# busiest switch (S1 on Fig. 1: three flows in, results out) saturated it, its queues pushed
# round trips past the workers' 0.5 s timeout and the resends collapsed the run (1.3-2.4 flows
# into the PS); at 0.5 it keeps up (1 flow, shortest/aro 4.3 in one measured run).
DEFAULT_SCALE_MBPS = {"embedded": 2.0, "bmv2": 0.5}
# Workers pace slightly under their planned rate so shaping queues do not overflow.
PACING_HEADROOM = 0.95
# Host agents import numpy and the CLI before they are ready; on a loaded 2-core machine that
# can take seconds. It is not part of the iteration time (the per-iteration timeout).
AGENT_START_SECONDS = 60.0
# Up to this many workers, each runs in its own `ina worker` process in its host's namespace;
# more share this many processes (dataplane/multihost.py): at 85 MB and seconds of imports per
# process, one per worker did not fit 200 workers on this 2-core machine.
DEFAULT_AGENT_PROCESSES = 16
# The controller waits CONNECT_SECONDS, plus this much per switch, for every switch to hold its
# pipeline and entries (`--connect-timeout`), and the runner waits CONTROLLER_START_SECONDS
# more for it (its imports on a loaded machine). Each bmv2 switch parses ina.p4's 3.2 MB JSON:
# 34 of them did not all take it within 15 s on 2 loaded cores (~1 s each).
CONNECT_SECONDS = 15.0
PROGRAM_SECONDS = {"embedded": 0.5, "bmv2": 2.0}
CONTROLLER_START_SECONDS = 45.0


# Seconds a restarted switch may take until the controller has re-programmed it: about 1 s
# when the machine is idle, but a bmv2 restarted mid-transfer parses the 3.2 MB JSON while its
# neighbours' frames flood it, and in one full test run on 2 loaded cores it was not
# re-programmed within 30 s (`restart_switch`'s error now says what the controller saw).
RESTART_SECONDS = 60.0


def program_timeout(target: str, switches: int) -> float:
    """Seconds the controller waits for `switches` switches of `target` to be programmed."""
    return CONNECT_SECONDS + PROGRAM_SECONDS[target] * switches


# A switch that answers no read for longer than the controller's `--switch-grace` (10 s) is
# planned around. 36 bmv2 switches at 200 workers, on 2 cores at load 55, each missed reads
# for more than 10 s (ten leaves failed at once, and the controller tried to re-plan around
# them); the runner gives bmv2 this much more per switch.
SWITCH_GRACE_SECONDS = 10.0
GRACE_SECONDS = {"embedded": 0.0, "bmv2": 0.5}


def switch_grace(target: str, switches: int) -> float:
    """Seconds a switch of `switches` of `target` may go unanswered before it counts as failed."""
    return SWITCH_GRACE_SECONDS + GRACE_SECONDS[target] * switches


def controller_wait(target: str, switches: int) -> float:
    """Seconds the runner waits for the controller to have programmed every switch."""
    return program_timeout(target, switches) + CONTROLLER_START_SECONDS


# The PS serves until every worker has reported, when the runner says stop on its stdin
# (`_ps_report`): a worker whose copy of a result was lost gets it again only through a PROBE,
# which it sends with the resend at the fragment's second timeout, up to MAX_RTO +
# BACKOFF_CEILING after its last send (dataplane/rto.py), and a PS gone before then leaves it
# waiting for good (bmv2 at 5 % loss: RTO 0.8 s, the PROBE 1.8 s after, the PS gone after a
# 1.5 s linger).


HOW_TO_GET_MININET = (
    "Mininet is not installed in this Python environment (`import mininet` fails); `ina "
    "mininet` and the Mininet benchmarks need it: as root, `apt-get install mininet` and then "
    "`make mininet-link`, which links Debian's Mininet into the venv (`make setup` does both)"
)


class RunnerError(RuntimeError):
    """A component failed; the message names it."""


def missing_mininet() -> str | None:
    """Why Mininet cannot be used from this Python (what to install), or None. The node
    classes (controller.emulation.mininet_nodes) import Mininet, so this module loads them only when
    it builds a network: everything else here, and every command that needs no Mininet, works
    without it."""
    try:
        import mininet.net  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "mininet":
            raise
        return HOW_TO_GET_MININET
    return None


@dataclass
class IterationResult:
    """One iteration; `seconds` is the slowest worker's transfer time (process start excluded)."""

    iteration: int
    seconds: float
    wall_seconds: float
    exact: bool
    goodput_mbps: dict[str, float]
    ps_link_packets: int
    ps_link_flows: float  # packets on the PS link per fragment, recovery traffic included
    ps_flows: float  # distinct flows per fragment the PS received (its own count)
    # (seconds since the workers started, packets sent into the PS so far), every 0.1 s
    ps_link_samples: list[tuple[float, int]] = field(default_factory=list)
    task: str = ""  # job/task
    ps: str = ""
    model_share: float | None = None  # the task's shard of the model (None: all of it)
    # the PS's own check of its shard (None: it did not report, e.g. stopped while unfinished)
    ps_exact: bool | None = None
    retransmissions: int = 0  # the workers' resends: on timeout, on CONTROL, found lost (RACK)
    # the PS's report (dataplane/ps.py: exactly-once counts)
    ps_report: dict = field(default_factory=dict)
    # each worker's report (dataplane/worker.py: resends by cause, its round trip estimate and RTO)
    worker_reports: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class Restart:
    """A switch restart: its process's boot, then the controller's reconnect and re-push."""

    boot_seconds: float
    repush_seconds: float


@dataclass
class RunResult:
    scheme: str
    plan_rate_gbps: float
    scale_mbps_per_gbps: float
    iterations: list[IterationResult] = field(default_factory=list)
    switch_push_seconds: dict[str, list[float]] = field(default_factory=dict)
    setup_seconds: dict[str, float] = field(default_factory=dict)  # Emulation.setup_seconds
    switch_writes: dict[str, list[int]] = field(default_factory=dict)  # updates per push

    @property
    def exact(self) -> bool:
        return all(it.exact for it in self.iterations)

    @property
    def mean_seconds(self) -> float:
        return sum(it.seconds for it in self.iterations) / max(1, len(self.iterations))

    def to_dict(self) -> dict:
        return {**asdict(self), "exact": self.exact}


@dataclass
class JobAgents:
    """The running agents of a job that follow the API (`Emulation.start_job`)."""

    name: str
    iteration: int
    ps: subprocess.Popen
    workers: dict[str, subprocess.Popen]

    def kill(self) -> None:
        for proc in [self.ps, *self.workers.values()]:
            if proc.poll() is None:
                proc.kill()


@dataclass
class JobRun:
    """One iteration of a job run by `Emulation.finish_job`: each worker's report and the
    PS's (dataplane/agents.py)."""

    name: str
    workers: dict[str, dict]
    ps: dict

    @property
    def exact(self) -> bool:
        """Every worker's sum and the PS's own check exact, each fragment counted once."""
        return (
            all(r.get("exact") for r in self.workers.values())
            and self.ps.get("exact") is True
            and self.ps.get("miscounted") == 0
            and self.ps.get("finished") == self.ps.get("fragments")
        )


class Emulation:
    """The Mininet network plus its switch and controller processes; a context manager."""

    def __init__(
        self,
        network: Network,
        plan: Plan,
        *,
        target: str = "embedded",
        scale_mbps: float | None = None,
        workdir: Path | None = None,
        plain_switches: str = "p4",
        switches: str = "all",
        agent_processes: int = DEFAULT_AGENT_PROCESSES,
        pace_mbps: float | None = None,
        api: bool = False,
        mark_depth: int | None = None,
    ):
        if target == "bmv2" and not switch_path():
            raise RunnerError(
                "target bmv2: simple_switch_grpc is not installed on this machine. "
                + HOW_TO_GET_BMV2
            )
        self.program_args = self._program_args(target)  # p4c first: fails before Mininet
        # Congestion marks from this many queued packets, switch ports and workers alike
        # (None: the controller's and the workers' default, p4src/README.md "Congestion mark").
        self.mark_depth = mark_depth
        self.mark_args = [] if mark_depth is None else ["--mark-depth", str(mark_depth)]
        self.network, self.plan, self.target = network, plan, target
        self.scale = scale_mbps or DEFAULT_SCALE_MBPS[target]
        check_scale(network, self.scale)
        # Workers pace at `pace` Mbps per model Gbps (default: the links' scale). Below the
        # links' scale the links never queue: at 200 workers the emulated switches forward
        # only a few Mbps in all, and links shaped that slow queued a window of fragments for
        # longer than the 0.5 s retransmission timeout (every fragment timed out, none
        # completed); paced that slow on fast links, every scheme still sends at its plan's
        # rates times one factor.
        self.pace = pace_mbps or self.scale
        # Plain (non-INA) switches: the P4 target without aggregation entries, or Open vSwitch
        # under the OpenFlow controller (controller/southbound/openflow/).
        self.plain_switches = plain_switches
        self.ovs: OvsSwitches | None = None
        # Only the hosts the plan uses are built; all switches, or only the plan's
        # (controller/emulation/subset.py).
        self.nodes = plan_nodes(network, plan, switches)
        # With `api`, the controller serves the jobs API on a management network that every
        # host reaches (controller/emulation/management.py), and every host is built: a job
        # submitted at run time may use any of them.
        self.api = api
        self.management: Management | None = None
        self.api_url: str | None = None
        self.api_token = secrets.token_hex(16) if api else None
        if api:
            self.nodes |= frozenset(network.hosts)
        self.agent_processes = agent_processes
        # Seconds of each set-up step: Mininet's build, the switches listening, the controller
        # done programming them.
        self.setup_seconds: dict[str, float] = {}
        self.ids = Numbering(network)
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="ina-mininet-"))
        self.net: Any = None  # the Mininet network (untyped), once built
        self.procs: dict[str, subprocess.Popen] = {}
        self.switch_ports: dict[str, dict[int, str]] = {}
        self.host_intf: dict[str, str] = {}
        self.logs: list = []
        self.addresses: dict[str, str] = {}
        self.node: dict = {}  # model name -> Mininet node
        self._sigterm_before: Any = None  # the SIGTERM handler before ours

    # -- lifecycle
    def __enter__(self) -> Self:
        self._unwind_on_sigterm()
        try:
            for step, action in (
                ("mininet", self._build),
                ("switches", self._start_switches),
                ("controller", self._start_controller),
            ):
                started = time.monotonic()
                action()
                self.setup_seconds[step] = round(time.monotonic() - started, 3)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _unwind_on_sigterm(self) -> None:
        """Make SIGTERM (`kill`, a CI job's timeout) unwind the run like Ctrl-C does, so that
        `close` and the impairments' own exits run: killed outright, a run left its nft tables
        hooked on interface names the next emulation reuses, and its agents and switches
        running. The second SIGTERM is ignored, so it cannot cut the clean-up short. Python
        delivers signals to the main thread only; elsewhere the default stays."""
        if threading.current_thread() is not threading.main_thread():
            return

        def unwind(signum, frame):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            raise SystemExit(128 + signum)

        self._sigterm_before = signal.signal(signal.SIGTERM, unwind)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()
        if self.node:  # built, so Mininet and the node classes are there
            from controller.emulation import mininet_nodes as nodes
        for node in self.node.values():
            if isinstance(node, nodes.P4RuntimeSwitch):
                node.stop_process()  # before Mininet deletes the interfaces under it
        if self.ovs is not None:
            self.ovs.close()
            self.ovs = None
        if self.management is not None:
            self.management.close()
            self.management = None
        for handle in self.logs:
            handle.close()
        self.logs.clear()
        if self.net is not None:
            self.net.stop()
            self.net = None
        if self._sigterm_before is not None:
            signal.signal(signal.SIGTERM, self._sigterm_before)
            self._sigterm_before = None

    # -- building
    def _build(self) -> None:
        if reason := missing_mininet():
            raise RunnerError(reason)
        from mininet.net import Mininet

        from controller.emulation import mininet_nodes as nodes
        from controller.emulation.faults.impair import remove_leftover_tables

        if left := remove_leftover_tables():
            print(
                f"removed link impairments an interrupted run left behind: {', '.join(left)}",
                file=sys.stderr,
            )

        bare = frozenset(
            s
            for s in self.network.switches
            if self.plain_switches == "ovs" and not self.network.is_ina(s)
        )
        topo = nodes.InaTopo(
            self.network,
            scale_mbps=self.scale,
            switch_cls=nodes.SWITCH_CLASSES[self.target],
            bare=bare,
            log_dir=self.workdir,
            nodes=self.nodes,
        )
        self.net = Mininet(
            topo=topo, controller=None, build=False, autoSetMacs=False, waitConnected=False
        )
        self.net.build()
        self.node = {model: self.net.get(name) for model, name in topo.mininet_name.items()}
        for model, node in self.node.items():
            if self.network.is_switch(model):
                self.switch_ports[model] = node.port_map()
            else:
                self.host_intf[model] = node.defaultIntf().name
        if self.api:
            self.management = Management()
            try:
                self.management.connect({h: self.node[h] for h in self.host_intf})
            except ManagementError as exc:
                raise RunnerError(f"management network: {exc}") from None

    def _start_switches(self) -> None:
        """Start every P4 switch process (Mininet's start), wait until each listens (they boot
        together), then the Open vSwitch bridges of the bare ones."""
        from controller.emulation import mininet_nodes as nodes

        p4 = [node for node in self.node.values() if isinstance(node, nodes.P4RuntimeSwitch)]
        for node in p4:
            node.boot_in_background = True
        try:
            self.net.start()
            for node in p4:
                node.wait_started()
        except nodes.SwitchProcessError as exc:
            raise RunnerError(str(exc)) from None
        self.addresses = {
            model: node.address
            for model, node in self.node.items()
            if isinstance(node, nodes.P4RuntimeSwitch)
        }
        ovs = [s for s, node in self.node.items() if isinstance(node, nodes.BareSwitch)]
        if ovs:
            from controller.southbound.openflow import OpenFlowError, start_ovs_switches

            try:
                # The OpenFlow controller follows the daemon's plan versions; the daemon
                # publishes a new one to the hosts once the bridges hold it.
                self.ovs = start_ovs_switches(
                    self.network,
                    self.plan,
                    {s: self.switch_ports[s] for s in ovs},
                    self.workdir,
                    follow_state=self.workdir / "state.json",
                )
            except OpenFlowError as exc:
                raise RunnerError(f"plain switches (Open vSwitch): {exc}") from None

    def restart_switch(self, switch: str, timeout: float = RESTART_SECONDS) -> Restart:
        """Kill a switch process and start it again empty; time its boot and the controller's
        re-push of pipeline and entries (seen in the controller's state file). A switch not
        re-programmed in time is an error naming what the controller saw of it and the end
        of its log."""
        pushes = len(self.state()["switches"][switch]["pushes_seconds"])
        from controller.emulation import mininet_nodes as nodes

        started = time.monotonic()
        try:
            self.node[switch].restart()
        except nodes.SwitchProcessError as exc:
            raise RunnerError(str(exc)) from None
        listening = time.monotonic()
        while time.monotonic() - started < timeout:
            if len(self.state()["switches"][switch]["pushes_seconds"]) > pushes:
                return Restart(listening - started, time.monotonic() - listening)
            time.sleep(0.02)
        seen = self.state()["switches"][switch]
        status = ", ".join(
            f"{key} {seen.get(key)}" for key in ("connected", "role", "failure", "problems")
        )
        log = (self.workdir / "controller.log").read_text(errors="replace")[-1200:]
        raise RunnerError(
            f"controller did not re-program switch {switch} within {timeout:g} s ({status}); "
            f"the controller's log ends: {log}"
        )

    def _start_controller(self) -> None:
        plan_file = self.workdir / "plan.json"
        self.plan.save(plan_file)
        switches = {
            s: {"address": a, "device_id": self.network.switches.index(s) + 1}
            for s, a in self.addresses.items()
        }
        (self.workdir / "switches.json").write_text(json.dumps(switches))
        self.state_file = self.workdir / "state.json"
        self.procs["controller"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "controller",
                self.network.source,
                "--plan",
                str(plan_file),
                "--switches",
                str(self.workdir / "switches.json"),
                "--state",
                str(self.state_file),
                "--log-level",
                "warning",
                "--connect-timeout",
                f"{program_timeout(self.target, len(self.addresses)):g}",
                "--switch-grace",
                f"{switch_grace(self.target, len(self.addresses)):g}",
                *self.program_args,
                *self.mark_args,
                *(["--openflow-state", str(self.ovs.state)] if self.ovs else []),
                *self._api_args(),
            ],
            stdout=self._log("controller.log"),
            stderr=subprocess.STDOUT,
        )
        wait = controller_wait(self.target, len(self.addresses))
        deadline = time.monotonic() + wait
        while not self.state_file.exists():
            if self.procs["controller"].poll() is not None:
                raise RunnerError(
                    "controller exited before programming the switches: "
                    + (self.workdir / "controller.log").read_text()[-800:]
                )
            if time.monotonic() > deadline:
                raise RunnerError(f"controller did not program the switches within {wait:g} s")
            time.sleep(0.1)
        if self.api:
            self._wait_for_api(deadline)

    def _api_args(self) -> list[str]:
        """The controller's API on the management network's address, with a token (it is
        off loopback)."""
        if self.management is None:
            return []
        token = self.workdir / "api-token"
        token.write_text(f"{self.api_token}\n")
        return ["--api", f"{self.management.address}:0", "--api-token-file", str(token)]

    def _wait_for_api(self, deadline: float) -> None:
        """Read the API's URL from the state file and wait until it answers."""
        while True:
            try:
                self.api_url = self.state()["api"]["url"]
                with urllib.request.urlopen(f"{self.api_url}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (OSError, ValueError, KeyError, TypeError):
                pass
            if self.procs["controller"].poll() is not None or time.monotonic() > deadline:
                raise RunnerError(
                    "controller's API did not answer: "
                    + (self.workdir / "controller.log").read_text()[-800:]
                )
            time.sleep(0.1)

    @staticmethod
    def _program_args(target: str) -> list[str]:
        """bmv2 takes only p4c's JSON with the P4Info p4c wrote for it; the embedded target
        runs its built-in pipeline with the checked-in P4Info (the daemon's defaults)."""
        if target != "bmv2":
            return []
        try:
            program = compile_for_bmv2()
        except P4CompileError as exc:
            raise RunnerError(f"target bmv2: {exc}") from None
        return ["--p4blob", str(program.json), "--p4info", str(program.p4info)]

    def wait_for_traffic(self, packets: int = 300, timeout: float = 30.0) -> float:
        """Block until the first task's PS link has carried `packets` more packets than when
        called: a disturbance injected then really happens mid-transfer. Returns the wait."""
        port = self._ps_port(self.plan.tasks[0])
        base, started = _tx_packets(port), time.monotonic()
        while _tx_packets(port) - base < packets:
            if time.monotonic() - started > timeout:
                raise RunnerError(f"no traffic reached the PS within {timeout:g} s")
            time.sleep(0.02)
        return time.monotonic() - started

    def set_link(self, u: str, v: str, up: bool) -> None:
        """Cut the link u–v (`up=False`) or mend it.

        On the embedded target both ends go down, as Mininet's `link u v down` does. bmv2
        cannot take that: its one receive thread then blocks in the down port's libpcap read,
        so every port of the switch stops receiving until a frame arrives on that port after
        it is up again (measured with bmv2 1.15.5; it is what left the bmv2 link-cut test
        without a re-plan). A cut cable is a loss of carrier, which bmv2 survives, but a veth
        pair cannot lose carrier at both ends; so on bmv2 both ends stay up and drop every
        frame they send (a `pfifo limit 0` root qdisc, which never bypasses its empty queue),
        and mending restores the link's TCLink shaping.
        """
        if self.target != "bmv2":
            self.net.configLinkStatus(self.node[u].name, self.node[v].name, "up" if up else "down")
            return
        for link in self.net.linksBetween(self.node[u], self.node[v]):
            for intf in (link.intf1, link.intf2):
                if up:
                    intf.config(**intf.params)
                else:
                    failed = intf.tc("%s qdisc replace dev %s root pfifo limit 0").strip()
                    if failed:
                        raise RunnerError(f"could not cut {intf}: {failed}")

    def _log(self, name: str):
        """A log file in the work directory, closed with the emulation."""
        handle = (self.workdir / name).open("wb")
        self.logs.append(handle)
        return handle

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    # -- running the job
    def iterate(
        self,
        gradient_mb: float,
        iteration: int,
        timeout: float,
        during: Callable[[], None] | None = None,
    ) -> list[IterationResult]:
        """One iteration of every task (one result per task); `during` runs in a thread while
        the workers send."""
        return [
            it
            for group in self._groups()
            for it in self._iterate_group(group, gradient_mb, iteration, timeout, during)
        ]

    def start_job(
        self,
        name: str,
        workers: list[str],
        ps: str,
        gradient_mb: float,
        iteration: int,
        *,
        seed: int | None = None,
    ) -> JobAgents:
        """Start, in their hosts' namespaces, the agents of job `name`, submitted (or to be
        submitted) through the API: each follows the API by the job's name over the
        management network, waits until the controller has installed it, takes its ids and
        rate from the job's rows and says it is ready. `finish_job` releases and collects
        them."""
        if self.api_url is None:
            raise RunnerError("start_job needs the emulation's API (Emulation(..., api=True))")
        common = [
            "--api",
            self.api_url,
            "--job-name",
            name,
            "--size-mb",
            str(gradient_mb),
            "--epoch",
            str(iteration),
            "--seed",
            str(iteration if seed is None else seed),
            "--wait-go",
            "--verify",
        ]

        def agent(role: str, host: str, *extra: str) -> subprocess.Popen:
            return self.node[host].popen(
                [
                    sys.executable,
                    "-m",
                    "dataplane",
                    role,
                    "--iface",
                    self.host_intf[host],
                    "--ip",
                    self.ids.host_ip[host],
                    *common,
                    *extra,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )

        started = JobAgents(name, iteration, agent("ps", ps), {})
        try:
            for worker in workers:
                started.workers[worker] = agent(
                    "worker",
                    worker,
                    "--name",
                    worker,
                    "--rate-scale",
                    f"{self.pace / 1000 * PACING_HEADROOM:.12f}",
                )
        except BaseException:
            started.kill()
            raise
        return started

    def finish_job(self, agents: JobAgents, timeout: float, ready_timeout: float) -> JobRun:
        """Release `agents` together once every one is ready (within `ready_timeout` s: it
        covers waiting for the job's submission), then collect every worker's report and the
        PS's within `timeout` s."""
        everyone = [agents.ps, *agents.workers.values()]
        with _no_agent_outlives(everyone):
            ps_name = f"PS of job {agents.name}"
            _release_when_ready(
                {ps_name: agents.ps} | agents.workers, time.monotonic() + ready_timeout
            )
            reports = _collect(
                agents.workers,
                {w: [w] for w in agents.workers},
                {ps_name: agents.ps},
                time.monotonic() + timeout,
                agents.iteration,
            )
            return JobRun(agents.name, reports, _ps_report(agents.ps))

    def _groups(self) -> list[list[TaskPlan]]:
        """Tasks that run at once: all tasks of a sharded job (each worker sends every task's
        PS its shard of one gradient, `model_share`), otherwise one task at a time."""
        groups: dict[tuple[str, ...], list[TaskPlan]] = {}
        for tp in self.plan.tasks:
            key = (tp.job,) if tp.model_share is not None else (tp.job, tp.task)
            groups.setdefault(key, []).append(tp)
        return list(groups.values())

    def _iterate_group(
        self,
        tps: list[TaskPlan],
        gradient_mb: float,
        iteration: int,
        timeout: float,
        during: Callable[[], None] | None,
    ) -> list[IterationResult]:
        """Start a PS per task and each worker once (a sharded worker reads its shards from
        the state file), release them together, and check every worker's sum and every PS's
        own shard against the exact sum."""
        rows = {
            tp.task: {
                row["worker"]: row
                for row in self.state()["workers"]
                if (row["job_id"], row["task_id"]) == self._ids(tp)
            }
            for tp in tps
        }
        ports = {tp.task: self._ps_port(tp) for tp in tps}
        before = {task: _tx_packets(port) for task, port in ports.items()}
        first = tps[0]
        common = [
            "--job",
            str(self.ids.job_id(first.job)),
            "--workers",
            str(len(first.paths)),
            "--size-mb",
            str(gradient_mb),
            "--epoch",
            str(iteration),
            "--seed",
            str(iteration),
            "--state",
            str(self.state_file),
            "--wait-go",
        ]
        pss = {
            tp.task: self.node[tp.ps].popen(
                [
                    sys.executable,
                    "-m",
                    "dataplane",
                    "ps",
                    "--iface",
                    self.host_intf[tp.ps],
                    "--ip",
                    self.ids.host_ip[tp.ps],
                    *common,
                    "--task",
                    str(self.ids.task_id(tp.job, tp.task)),
                    "--verify",
                    "--result-flow-id",
                    str(next(iter(rows[tp.task].values()))["result_flow_id"]),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for tp in tps
        }
        workers, serves = self._start_workers(first, rows[first.task], common, iteration)
        ps_names = {task: f"PS {tp.ps}" for task, tp in zip(pss, tps, strict=True)}
        with _no_agent_outlives([*workers.values(), *pss.values()]):
            # Every agent imports for seconds on a loaded machine: release them together, the PSs
            # first, so the iteration times the network rather than process start-up.
            _release_when_ready(
                {ps_names[t]: proc for t, proc in pss.items()} | workers,
                time.monotonic() + AGENT_START_SECONDS,
            )
            started = time.monotonic()
            disturbance = threading.Thread(target=during) if during else None
            if disturbance:
                disturbance.start()
            sampling = threading.Event()
            samples: dict[str, list[tuple[float, int]]] = {task: [] for task in pss}
            samplers = [
                threading.Thread(
                    target=_sample, args=(ports[t], before[t], started, samples[t], sampling)
                )
                for t in pss
            ]
            for sampler in samplers:
                sampler.start()
            try:
                reports = _collect(
                    workers,
                    serves,
                    {ps_names[t]: proc for t, proc in pss.items()},
                    started + timeout,
                    iteration,
                )
            finally:
                if disturbance:
                    disturbance.join()
                sampling.set()
                for sampler in samplers:
                    sampler.join()
        wall = time.monotonic() - started
        exact = all(r.get("exact") for r in reports.values())
        goodput = {w: gradient_mb * 8 * 2**20 / 1e6 / r["seconds"] for w, r in reports.items()}
        seconds = max(r["seconds"] for r in reports.values())
        resent = sum(
            r["resent_on_timeout"] + r["resent_on_control"] + r.get("resent_on_loss", 0)
            for r in reports.values()
        )
        out = []
        for tp in tps:
            ps_report = _ps_report(pss[tp.task])
            packets = _tx_packets(ports[tp.task]) - before[tp.task]
            fragments = ps_report.get("fragments") or reports[next(iter(reports))]["fragments"]
            out.append(
                IterationResult(
                    iteration,
                    seconds,
                    wall,
                    exact and ps_report.get("exact") is not False,
                    goodput,
                    packets,
                    round(packets / max(1, fragments), 2),
                    ps_report.get("flows_per_fragment", 0.0),
                    samples[tp.task],
                    task=f"{tp.job}/{tp.task}",
                    ps=tp.ps,
                    model_share=tp.model_share,
                    ps_exact=ps_report.get("exact"),
                    retransmissions=resent,
                    ps_report=ps_report,
                    worker_reports=reports,
                )
            )
        return out

    def _start_workers(
        self, first: TaskPlan, rows: dict[str, dict], common: list[str], iteration: int
    ) -> tuple[dict[str, subprocess.Popen], dict[str, list[str]]]:
        """Start the workers' agents: one `ina worker` per host in its namespace while there
        are at most `agent_processes` workers, else the workers split evenly over that many
        `python -m dataplane workers` processes (dataplane/multihost.py), each opening a socket
        in each of its hosts' namespaces. Returns the processes by name and the workers each
        serves."""
        rate = [
            "--rate-gbps",
            f"{first.rate_gbps * self.pace / 1000 * PACING_HEADROOM:.9f}",
            "--rate-scale",
            f"{self.pace / 1000 * PACING_HEADROOM:.12f}",
            *self.mark_args,
            "--loss-query",
            "--verify",
            "--task",
            str(self.ids.task_id(first.job, first.task)),
        ]
        names = list(first.paths)
        if len(names) <= self.agent_processes:
            return {
                worker: self.node[worker].popen(
                    [
                        sys.executable,
                        "-m",
                        "dataplane",
                        "worker",
                        "--iface",
                        self.host_intf[worker],
                        "--ip",
                        self.ids.host_ip[worker],
                        *common,
                        *rate,
                        "--ps-ip",
                        rows[worker]["ps_ip"],
                        "--index",
                        str(index),
                        "--flow-id",
                        str(rows[worker]["flow_id"]),
                        "--next-node",
                        str(rows[worker]["next_node"]),
                        "--name",
                        worker,
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
                for index, worker in enumerate(names)
            }, {worker: [worker] for worker in names}
        agents, serves = {}, {}
        for number, members in enumerate(_split(names, self.agent_processes), start=1):
            hosts_file = self.workdir / f"agent-{number}-iteration-{iteration}.json"
            hosts_file.write_text(
                json.dumps(
                    [
                        {
                            "name": w,
                            "netns": f"/proc/{self.node[w].pid}/ns/net",
                            "iface": self.host_intf[w],
                            "ip": self.ids.host_ip[w],
                            "index": names.index(w),
                            "flow_id": rows[w]["flow_id"],
                            "next_node": rows[w]["next_node"],
                            "ps_ip": rows[w]["ps_ip"],
                        }
                        for w in members
                    ]
                )
            )
            name = f"agent {number} ({members[0]}..{members[-1]})"
            agents[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dataplane",
                    "workers",
                    "--hosts",
                    str(hosts_file),
                    *common,
                    *rate,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=_child_env(),
            )
            serves[name] = members
        return agents, serves

    def _ids(self, tp) -> tuple[int, int]:
        return self.ids.job_id(tp.job), self.ids.task_id(tp.job, tp.task)

    def _ps_port(self, tp) -> str:
        """Switch-side interface of the link into the PS: its tx counter counts PS-bound packets."""
        (leaf,) = list(self.network.graph.predecessors(tp.ps))
        port = self.network.graph.edges[leaf, tp.ps]["out_port"]
        return self.switch_ports[leaf][port]


def _ps_report(ps: subprocess.Popen) -> dict:
    """The PS's JSON report, asked for once every worker has its sums (a line on the PS's
    stdin stops it; terminated if it does not answer)."""
    try:
        out, _ = ps.communicate(input=b"stop\n", timeout=30)
    except subprocess.TimeoutExpired:
        ps.terminate()
        out, _ = ps.communicate(timeout=10)
    return next(
        (json.loads(ln) for ln in reversed(out.decode().splitlines()) if ln.startswith('{"ps"')), {}
    )


def _split(names: list[str], parts: int) -> list[list[str]]:
    """`names` in `parts` contiguous runs whose lengths differ by at most one."""
    size, extra = divmod(len(names), parts)
    bounds = list(accumulate([0] + [size + (i < extra) for i in range(parts)]))
    return [names[lo:hi] for lo, hi in pairwise(bounds) if hi > lo]


def _child_env() -> dict[str, str]:
    """Our environment with our module path: a child started outside Mininet's hosts imports
    this checkout, as the embedded switches do."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _collect(
    agents: dict[str, subprocess.Popen],
    serves: dict[str, list[str]],
    pss: dict[str, subprocess.Popen],
    deadline: float,
    iteration: int,
) -> dict[str, dict]:
    """Each worker's JSON report (an agent serving several prints one per worker, with its
    `name`); kills every agent and names the culprit on a hang."""
    reports = {}
    for agent, proc in agents.items():
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RunnerError(
                f"worker {agent} did not finish iteration {iteration} in time "
                f"(hang); {_stop_and_report({**agents, **pss})}"
            ) from None
        lines = [json.loads(ln) for ln in out.decode().splitlines() if ln.startswith("{")]
        if serves[agent] == [agent]:
            lines = [{**line, "name": agent} for line in lines[-1:]]
        got = {line.get("name"): line for line in lines}
        if proc.returncode not in (0, 1) or not set(serves[agent]) <= set(got):
            for ps in pss.values():
                ps.kill()
            raise RunnerError(f"worker {agent} failed: {out.decode()[-500:]}")
        reports.update({w: got[w] for w in serves[agent]})
    return reports


@contextmanager
def _no_agent_outlives(agents: list[subprocess.Popen]) -> Iterator[None]:
    """Kill the iteration's agents if it ends by an exception (a hang, a failed agent, the
    run stopped): they run in Mininet's namespaces, and nothing else would stop them."""
    try:
        yield
    except BaseException:
        for proc in agents:
            if proc.poll() is None:
                proc.kill()
        raise


def _release_when_ready(agents: dict[str, subprocess.Popen], deadline: float) -> None:
    """Wait for each agent's ready line (dataplane/agents.py --wait-go), then send every one
    its go."""
    for name, proc in agents.items():
        stdout = proc.stdout
        assert stdout is not None  # agents start with stdout=PIPE
        line = b""
        while not line.startswith(b'{"ready"'):
            if proc.poll() is not None or time.monotonic() > deadline:
                out = line + (stdout.read() if proc.poll() is not None else b"")
                for other in agents.values():
                    other.kill()
                raise RunnerError(f"{name} did not get ready to send: {out.decode()[-500:]}")
            if select.select([stdout], [], [], 0.1)[0]:
                line = stdout.readline()
    for proc in agents.values():
        assert proc.stdin is not None  # and stdin=PIPE
        proc.stdin.write(b"go\n")
        proc.stdin.flush()


def _stop_and_report(agents: dict[str, subprocess.Popen]) -> str:
    """Stop the agents with SIGTERM and gather what each was still waiting for
    (dataplane/agents.py)."""
    for proc in agents.values():
        if proc.poll() is None:
            proc.terminate()
    waiting = []
    for name, proc in agents.items():
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            continue
        for line in (out or b"").decode().splitlines():
            if line.startswith("{") and '"stopped"' in line:
                waiting.append(f"{name} waiting for {json.loads(line)['stopped']}")
    return "; ".join(waiting) or "no agent reported what it waited for"


def _sample(interface: str, base: int, started: float, out: list, stop: threading.Event) -> None:
    """Record the PS link's packet count over time: the job's progress as the PS sees it."""
    while not stop.wait(0.1):
        try:
            out.append((round(time.monotonic() - started, 3), _tx_packets(interface) - base))
        except FileNotFoundError:  # the interface went away with a failed run
            return


def _tx_packets(interface: str) -> int:
    return int(Path(f"/sys/class/net/{interface}/statistics/tx_packets").read_text())


# Mininet shapes a link with htb up to this many Mbps (TCIntf.bwParamMax); above it, it prints
# an error and leaves the link unshaped.
MAX_SHAPED_MBPS = 1000


def check_scale(network: Network, scale_mbps: float) -> None:
    """Refuse a link scale that would leave the network's fastest link unshaped."""
    fastest = max(data["capacity_gbps"] for _, _, data in network.graph.edges(data=True))
    if fastest * scale_mbps > MAX_SHAPED_MBPS:
        raise RunnerError(
            f"at {scale_mbps:g} Mbps per model Gbps the {fastest:g} Gbps links would be shaped "
            f"at {fastest * scale_mbps:g} Mbps, and Mininet shapes at most {MAX_SHAPED_MBPS} "
            f"Mbps per link (it would leave them unshaped): use a link scale of at most "
            f"{MAX_SHAPED_MBPS / fastest:g}"
        )


def worker_rate_gbps(plan: Plan) -> float:
    """The first job's rate as its workers send: the sum over its shards' tasks when the job
    is sharded (each worker sends every PS its shard), else its first task's."""
    first = plan.tasks[0]
    if first.model_share is None:
        return first.rate_gbps
    return sum(tp.rate_gbps for tp in plan.tasks if tp.job == first.job)


def run(
    network: Network,
    plan: Plan,
    *,
    iterations: int,
    gradient_mb: float,
    target: str = "embedded",
    scale_mbps: float | None = None,
    timeout: float = 120.0,
    on_iteration=None,
    plain_switches: str = "p4",
    switches: str = "all",
    agent_processes: int = DEFAULT_AGENT_PROCESSES,
    pace_mbps: float | None = None,
) -> RunResult:
    """Run the whole closed loop once; raises RunnerError naming the component that failed."""
    scale_mbps = scale_mbps or DEFAULT_SCALE_MBPS[target]
    result = RunResult(plan.scheme, worker_rate_gbps(plan), scale_mbps)
    with Emulation(
        network,
        plan,
        target=target,
        scale_mbps=scale_mbps,
        plain_switches=plain_switches,
        switches=switches,
        agent_processes=agent_processes,
        pace_mbps=pace_mbps,
    ) as emu:
        result.setup_seconds = dict(emu.setup_seconds)
        for k in range(1, iterations + 1):
            for it in emu.iterate(gradient_mb, k, timeout):
                result.iterations.append(it)
                if on_iteration:
                    on_iteration(it)
        switches_state = emu.state()["switches"]
        result.switch_push_seconds = {s: d["pushes_seconds"] for s, d in switches_state.items()}
        result.switch_writes = {s: d["writes"] for s, d in switches_state.items()}
    return result
