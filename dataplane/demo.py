"""`ina dataplane-demo`: N workers and a PS aggregate a gradient across one switch.

Builds veth pairs (switch ends in the root namespace, hosts in a private namespace), starts
the switch (`--target embedded` or `bmv2`), programs it over P4Runtime by P4Info names as the
controller would for a plan "all workers aggregate at this switch, next hop the PS", runs
`ina ps` and `ina worker --verify` processes, prints one JSON summary and removes everything
it created.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from dataplane.bmv2 import free_tcp_port
from dataplane.frame import SLOTS_PER_PIPE
from dataplane.netns import VethNet
from dataplane.p4rt_client import Client
from dataplane.targets import KINDS, missing, program_for, start_target

ROOT = Path(__file__).resolve().parent.parent
JOB, TASK, AGG_FLOW, RESULT_FLOW, PS_NODE, SWITCH_NODE, GROUP = 1, 0, 100, 101, 200, 1, 1


def program_aggregation(client: Client, senders: list[int], out_port: int, slots: int) -> None:
    """Flows 1..n (entering on ports 1..n, pipe 0) are summed here and leave on `out_port`."""
    full = (1 << len(senders)) - 1
    entities = [client.clone_session(p, p) for p in [*senders, out_port]]
    entities += [
        client.table_entry(
            "job_slots", {"job": JOB, "generation": 0}, "set_job_slots", base=0, count=slots
        ),
        client.table_entry(
            "ina_forward", {"job": JOB, "task": TASK, "flow_id": AGG_FLOW}, "forward", port=out_port
        ),
        client.group(GROUP, senders),
        client.table_entry(
            "result_multicast", {"job": JOB, "task": TASK}, "set_result_group", group=GROUP
        ),
    ]
    for i, port in enumerate(senders):
        entities.append(
            client.table_entry(
                "ina_aggregate",
                {"job": JOB, "task": TASK, "pipe": 0, "flow_id": i + 1},
                "aggregate",
                tag=1,
                member=1 << i,
                full=full,
                out_flow=AGG_FLOW,
                next_node=PS_NODE,
                name_group=0,
            )
        )
        entities.append(
            client.table_entry(
                "ipv4_lpm", {"dst_addr": (0x0A000000 + port, 32)}, "forward", port=port
            )
        )
    client.write(*entities)


def run_demo(
    workers: int, size_mb: float, seed: int, window: float, target: str = "embedded"
) -> dict:
    ps_port = workers + 1
    program = program_for(target)
    with VethNet(ps_port) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target(target, net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            program_aggregation(client, list(range(1, workers + 1)), ps_port, slots=SLOTS_PER_PIPE)
            common = [
                "--workers",
                str(workers),
                "--size-mb",
                str(size_mb),
                "--job",
                str(JOB),
                "--task",
                str(TASK),
            ]
            exec_ns = ["ip", "netns", "exec", net.ns, sys.executable, "-m", "dataplane"]
            ps = subprocess.Popen(
                [
                    *exec_ns,
                    "ps",
                    "--iface",
                    net.host_if[ps_port],
                    "--ip",
                    f"10.0.0.{ps_port}",
                    "--result-flow-id",
                    str(RESULT_FLOW),
                    *common,
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs = [
                subprocess.Popen(
                    [
                        *exec_ns,
                        "worker",
                        "--iface",
                        net.host_if[i + 1],
                        "--ip",
                        f"10.0.0.{i + 1}",
                        "--ps-ip",
                        f"10.0.0.{ps_port}",
                        "--index",
                        str(i),
                        "--next-node",
                        str(SWITCH_NODE),
                        "--seed",
                        str(seed),
                        "--window",
                        str(window),
                        "--verify",
                        *common,
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i in range(workers)
            ]
            reports = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
            ps_report = json.loads(ps.communicate(timeout=60)[0])
            counters = {
                name: sum(client.counter(name))
                for name in ("aggregations_completed", "collisions", "duplicates")
            }
            client.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    return {
        "target": target,
        "workers": workers,
        "size_mb": size_mb,
        "exact": all(r.get("exact") for r in reports),
        "seconds": max(r["seconds"] for r in reports),
        "switch_counters": counters,
        "ps": ps_report,
        "worker_reports": reports,
    }


def cmd_demo(args: argparse.Namespace) -> int:
    reason = missing(args.target)
    if reason:
        print(f"ina dataplane-demo --target {args.target}: {reason}")
        return 1
    summary = run_demo(args.workers, args.size_mb, args.seed, args.window, args.target)
    print(json.dumps(summary, indent=2))
    return 0 if summary["exact"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dataplane-demo", help="workers + PS aggregate a gradient across one embedded switch"
    )
    p.add_argument(
        "--workers", type=int, default=3, help="workers, each on its own switch port (default 3)"
    )
    p.add_argument(
        "--size-mb",
        type=float,
        default=1.0,
        help="gradient size each worker sends, in MB (default 1)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic gradients (default 0)"
    )
    p.add_argument(
        "--window",
        type=float,
        default=16,
        help="each worker's initial window, in fragments (default 16)",
    )
    p.add_argument(
        "--target",
        choices=KINDS,
        default="embedded",
        help="switch: the embedded target or bmv2 simple_switch_grpc (default embedded)",
    )
    p.set_defaults(func=cmd_demo)
