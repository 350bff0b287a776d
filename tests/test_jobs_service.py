"""The job service inside the daemon's session, without switches (their drivers write nothing
while not connected): a job admitted at run time stays in the plan through the daemon's own
re-plans around dead links, with the ids it was given."""

from __future__ import annotations

import asyncio

from conftest import cluster_doc, free_port

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.service import daemon
from controller.service.admission import initial_layout
from controller.service.job_model import JobRequest
from controller.service.jobs import JobService
from controller.solvers import solve
from controller.southbound.p4runtime import SwitchTarget


def test_a_job_admitted_at_run_time_is_re_planned_with_every_job_and_keeps_its_ids(tmp_path):
    network = build_network(cluster_doc())
    targets = {s: SwitchTarget(s, f"127.0.0.1:{free_port()}") for s in network.switches}
    session = daemon.Session(
        network,
        solve(network, "shortest"),
        targets,
        tmp_path / "state.json",
        layout=initial_layout(network, 128),
    )
    session.drain_seconds = 0
    service = JobService(session, "shortest")
    session.jobs = service

    async def scenario():
        b = await service.submit(JobRequest(name="B", workers=["H02", "H03"], ps="H11"))
        before = session.layout["B"]
        await daemon.replan(session, {("L2", "S0")})  # the daemon re-plans every job
        return b, before

    b, before = asyncio.run(scenario())
    assert session.replan_failures == [] and session.version == 2
    assert {tp.job for tp in session.plan.tasks} == {"A", "B"}
    assert session.layout["B"] == before and b.id == before.job_id
    assert service.base is session.plan  # a deletion may come back to the joint plan
    judged = evaluate(session.network.without_links({("L2", "S0")}), session.plan)
    assert judged.consistent, judged.problems
    mine = [a for a in session.assignments if a.job_id == b.id]
    assert {a.worker for a in mine} == {"H02", "H03"}
    # Generation 1's flow ids, in B's own block of them.
    assert all(
        16384 + before.flow_base <= a.flow_id < 16384 + before.flow_base + before.flow_count
        and a.version == 2
        for a in mine
    )
