"""Which model nodes an emulation builds: the hosts a plan uses, and all switches or only
the ones on its paths.

A topology like ARO's default leaf-spine has 576 servers of which a job uses 201; every
Mininet host is a namespace with a shell and a shaped link, so building the idle ones cost set-up
time and memory for nothing. A re-plan never adds a host (workers and PSs are the jobs'), so
leaving the idle ones out changes nothing the run can see. Switches are different: a re-plan
around a dead link routes through switches the first plan did not use, so `switches="plan"`
(only the plan's) is for runs that cut no link, such as the scale benchmark; there it saves a
switch process per unused spine and the controller's probes of their links.
"""

from __future__ import annotations

from controller.model.network import Network
from controller.model.plan import Plan

SWITCH_CHOICES = ("all", "plan")


def plan_nodes(network: Network, plan: Plan, switches: str = "all") -> frozenset[str]:
    """The nodes to build: every host on a path of the plan (each task's workers and PS) and,
    with `switches="all"`, every switch, with `"plan"`, the switches on the plan's paths."""
    if switches not in SWITCH_CHOICES:
        raise ValueError(f"switches must be one of {', '.join(SWITCH_CHOICES)}, not {switches!r}")
    on_paths = {node for tp in plan.tasks for path in tp.paths.values() for node in path}
    on_paths |= {tp.ps for tp in plan.tasks}
    hosts = on_paths & set(network.hosts)
    kept = on_paths & set(network.switches) if switches == "plan" else set(network.switches)
    return frozenset(hosts | kept)
