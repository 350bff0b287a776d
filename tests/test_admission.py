"""Admission of jobs at run time, without switches: each newcomer is planned in what the running
jobs leave, the union of every admitted plan is judged by the evaluator as one plan, ids and
slot regions never overlap, a refusal changes nothing, and a job's entries do not move when
another comes or goes."""

from __future__ import annotations

from itertools import pairwise

import pytest
from conftest import HOSTS, cluster_doc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.compiler.program import CompileError, compile_plan
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.service import admission
from controller.service.admission import Refused
from controller.service.job_model import SLOT_REGION, JobRequest
from controller.solvers import solve
from controller.southbound.p4runtime import P4INFO


def start(scheme: str = "shortest", slots: int = 128):
    network = build_network(cluster_doc())
    plan = solve(network, scheme)
    return network, plan, admission.initial_layout(network, slots)


def admit(
    network, plan, layout, request: JobRequest, name: str, last_id: int, scheme: str = "shortest"
) -> admission.Admitted:
    return admission.admit(
        network,
        plan,
        layout,
        request,
        scheme=scheme,
        name=name,
        last_id=last_id,
        version=1,
        switches=list(network.switches),
        p4info=P4INFO,
    )


def _job_entries(programs: dict, job_id: int) -> dict[str, list[str]]:
    """Per switch, the entries naming the job and the multicast groups in its block."""
    low = job_id * admission.GROUP_BLOCK
    return {
        name: sorted(
            [repr(e) for e in prog.table_entries if e.match.get("job") == job_id]
            + [
                repr(g)
                for g in prog.multicast_groups
                if low < g.multicast_group_id <= low + admission.GROUP_BLOCK
            ]
        )
        for name, prog in programs.items()
    }


@pytest.mark.parametrize("scheme", ["shortest", "atp"])
def test_a_jobs_entries_stay_as_they_are_when_another_job_comes_and_goes(scheme):
    network, plan, layout = start(scheme)
    alone, _ = compile_plan(network, plan, layout=layout)
    request = JobRequest(workers=["H02", "H20", "H21"], ps="H11")
    new = admit(network, plan, layout, request, "B", last_id=1, scheme=scheme)
    together = new.programs
    assert _job_entries(together, 1) == _job_entries(alone, 1)
    assert any(_job_entries(together, new.layout.job_id).values())
    network2, plan2, layout2 = admission.without_job(
        new.network, new.union, {**layout, "B": new.layout}, "B", plan
    )
    after, _ = compile_plan(network2, plan2, layout=layout2)
    assert plan2 is plan  # what is left is the plan the controller started with
    assert {n: p.entities() for n, p in after.items()} == {
        n: p.entities() for n, p in alone.items()
    }


def test_a_newcomer_gets_what_is_left_and_running_rates_do_not_change():
    network, plan, layout = start()
    rate_a = plan.tasks[0].rate_gbps
    # B's PS shares L1's spine link with A's flows; its own host link is 10.
    new = admit(network, plan, layout, JobRequest(workers=["H02", "H03"], ps="H11"), "B", 1)
    assert new.union.task("A", "t0").rate_gbps == rate_a
    assert evaluate(new.network, new.union).consistent
    # A job sending to A's PS finds A's PS link full: refused, with the link named.
    with pytest.raises(Refused) as refused:
        admit(
            new.network,
            new.union,
            {**layout, "B": new.layout},
            JobRequest(workers=["H04"], ps="H10"),
            "C",
            2,
        )
    assert refused.value.reason == "capacity"
    assert "S0->L1" in str(refused.value) or "L1->H10" in str(refused.value)


def test_min_rate_refuses_a_job_that_would_get_less():
    network, plan, layout = start()
    request = JobRequest(workers=["H20", "H21"], ps="H22", min_rate_gbps=50)
    with pytest.raises(Refused, match="asks at least 50") as refused:
        admit(network, plan, layout, request, "B", 1)
    assert refused.value.reason == "capacity"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"workers": ["H02"], "ps": "nowhere"}, "unknown host"),
        ({"workers": ["S0"], "ps": "H11"}, "unknown host"),
        ({"workers": ["H02"], "ps": "H11", "scheme": "nope"}, "unknown scheme"),
    ],
)
def test_what_the_network_does_not_have_is_refused_as_bad_input(body, reason):
    network, plan, layout = start()
    with pytest.raises(Refused) as refused:
        admit(
            network, plan, layout, JobRequest(**body), "B", 1, scheme=body.get("scheme", "shortest")
        )
    assert (refused.value.reason, refused.value.status) == (reason, 422)


@pytest.mark.parametrize(
    "body",
    [
        {"workers": ["H02"], "ps": "H11", "colour": "red"},  # unknown field
        {"workers": ["H02"]},  # fixed without a PS
        {"workers": 3, "ps": "H11"},  # a count needs placement free
        {"workers": ["H02"], "placement": "free"},  # free takes a count
        {"workers": ["H02", "H02"], "ps": "H11"},
        {"workers": ["H02"], "ps": "H02"},
        {"workers": ["H02"], "ps": "H11", "slots": 0},
        {"workers": ["H02"], "ps": "H11", "priority": float("nan")},
        {"workers": ["H02"], "ps": "H11", "gradient_mb": "10"},  # strict: no text for a number
    ],
)
def test_a_request_off_the_schema_is_refused(body):
    with pytest.raises(ValidationError):
        JobRequest(**body)


def test_free_placement_places_on_free_servers_and_then_keeps_them():
    network, plan, layout = start()
    new = admit(
        network, plan, layout, JobRequest(workers=2, placement="free"), "B", 1, scheme="paring"
    )
    (task,) = [t for t in new.network.tasks if t.job == "B"]
    used = {h for tp in plan.tasks for h in (tp.ps, *tp.paths)}
    assert task.placement == "fixed" and not {task.ps, *task.workers} & used
    assert evaluate(new.network, new.union).consistent


def _gaps_of(layout, size: int) -> bool:
    """Brute force: is there a run of `size` slots no job holds?"""
    held = [False] * SLOT_REGION
    for own in layout.values():
        for s in range(own.slot_base, own.slot_base + own.slot_count):
            held[s] = True
    run = 0
    for taken in held:
        run = 0 if taken else run + 1
        if run >= size:
            return True
    return False


step = st.one_of(
    st.tuples(
        st.just("submit"),
        st.sampled_from(HOSTS),
        st.lists(st.sampled_from(HOSTS), min_size=1, max_size=4, unique=True),
        st.sampled_from([16, 128, 300, 700]),
        st.sampled_from(["shortest", "atp", "rr"]),
        st.sampled_from([0.0, 1.0, 8.0]),
    ),
    st.tuples(st.just("delete"), st.integers(0, 10)),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=8))
def test_every_sequence_of_arrivals_and_departures_keeps_the_union_consistent(steps):
    """The evaluator, the one judge, scores the union of every admitted plan after each
    step; slot regions and ids stay disjoint; a refusal changes nothing and refuses memory
    only when no free run of slots is long enough (brute force)."""
    network, plan, layout = start()
    base = plan
    last = 1
    for kind, *args in steps:
        if kind == "delete":
            api = [job for job in layout if job != "A"]
            if api:
                job = api[args[0] % len(api)]
                network, plan, layout = admission.without_job(network, plan, layout, job, base)
        else:
            ps, workers, slots, scheme, min_rate = args
            workers = [w for w in workers if w != ps]
            if not workers:
                continue
            request = JobRequest(workers=workers, ps=ps, slots=slots, min_rate_gbps=min_rate)
            before = (network, plan, dict(layout))
            try:
                new = admit(
                    network, plan, layout, request, f"J{len(steps)}{last}", last, scheme=scheme
                )
            except Refused as exc:
                assert (network, plan, layout) == before
                if exc.reason == "no slot memory left":
                    assert not _gaps_of(layout, slots)
                else:
                    assert exc.reason in ("capacity", "no plan"), exc
                continue
            assert _gaps_of(layout, slots)
            network, plan = new.network, new.union
            layout = {**layout, new.job: new.layout}
            last = new.layout.job_id
        judged = evaluate(network, plan)
        assert judged.consistent, judged.problems
        assert not judged.beyond_data_plane
        regions = sorted((own.slot_base, own.slot_base + own.slot_count) for own in layout.values())
        assert all(a[1] <= b[0] for a, b in pairwise(regions))
        assert len({own.job_id for own in layout.values()}) == len(layout)
        compile_plan(network, plan, layout=layout)  # every job's ids fit its blocks


def test_job_ids_run_out_at_31_and_a_freed_id_is_reused_as_late_as_possible():
    layout: dict = {}
    last = 0
    for k in range(admission.MAX_JOB_ID):
        own = admission.new_layout(layout, 1, last)
        layout[f"j{k}"], last = own, own.job_id
    assert sorted(own.job_id for own in layout.values()) == list(range(1, 32))
    with pytest.raises(Refused) as refused:
        admission.new_layout(layout, 1, last)
    assert refused.value.reason == "job ids"
    del layout["j2"], layout["j9"]  # ids 3 and 10 free again; the last given was 31
    assert admission.new_layout(layout, 1, last).job_id == 3
    assert admission.new_layout(layout, 1, 3).job_id == 10


@pytest.mark.parametrize("scheme", ["shortest", "atp", "aro", "grid", "paring"])
def test_a_job_cut_off_by_dead_links_is_refused_as_unreachable(scheme):
    """A worker whose leaf lost its only uplink cannot reach the PS: a 409 with the reason,
    whatever the scheme raises on the way (not an error of the controller)."""
    network, plan, layout = start()
    request = JobRequest(workers=["H20", "H02"], ps="H11", scheme=scheme)
    with pytest.raises(Refused) as refused:
        admission.admit(
            network,
            plan,
            layout,
            request,
            scheme=scheme,
            name="B",
            last_id=1,
            version=1,
            switches=list(network.switches),
            p4info=P4INFO,
            dead_links={("L2", "S0")},
        )
    assert (refused.value.reason, refused.value.status) == ("no path", 409)
    assert "H20" in str(refused.value) and "\n" not in str(refused.value)


def test_a_job_whose_groups_overflow_its_block_is_refused_with_the_switch_named(monkeypatch):
    """A job's result and name groups on one switch must fit its block of group ids; past it
    they would take the next job's ids. Shrunk to one group, the block cannot hold a
    switch's result group and a name group."""
    from controller.compiler import program

    network, plan, layout = start("atp")
    monkeypatch.setattr(program, "GROUP_BLOCK", 1)
    with pytest.raises(CompileError, match=r"switch \w+ needs 2 multicast groups for job"):
        compile_plan(network, plan, layout=layout)
