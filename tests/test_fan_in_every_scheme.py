"""Every scheme in the catalog plans within the data plane's fan-in limit by default.

For each scheme, random topologies of the kind it plans on (leaf-spine and fat-tree from
`controller.model.topogen`; EINA's edge cluster for the EINA family; ATRO's pool; the same Clos
networks with a `placement: free` task for PARING) are solved with a small `max_fan_in`
(2-4, so that it binds) and otherwise the scheme's defaults. The evaluator judges the plan:
consistent, every claimed rate carried, no point merging more flows than the limit, nothing
beyond the data plane; and the compiler must accept it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.compiler.program import compile_plan
from controller.evaluator.evaluate import evaluate
from controller.model import topogen
from controller.model.network import build_network
from controller.model.plan import MAX_FAN_IN
from controller.solvers import SchemeInputError, SolveOptions, solve
from controller.solvers.catalog import SCHEMES

EDGE = {"eina", "eina-iqcp", "eina-plus", "eina-fast"}
POOL = {"atro"}
PLACING = {"paring", "paring-opt"}
# CP-SAT schemes: one thread and a short limit, so the file stays short.
SECONDS = 2.0


def _clos(draw) -> dict:
    kind = draw(st.sampled_from(["leaf-spine", "fat-tree"]))
    seed = draw(st.integers(0, 1000))
    work = topogen.Workload(workers_per_job=draw(st.integers(5, 10)))
    opts = topogen.InaOptions(
        ina=draw(st.sampled_from([0.5, 1.0])), pipelines=draw(st.sampled_from([1, 2]))
    )
    if kind == "leaf-spine":
        return topogen.leaf_spine(
            leaves=draw(st.integers(3, 4)),
            spines=draw(st.integers(1, 3)),
            hosts_per_leaf=5,
            workload=work,
            ina=opts,
            capacity_gbps=10.0,
            seed=seed,
        )
    return topogen.fat_tree(
        k=4,
        hosts_per_edge=draw(st.integers(2, 3)),
        workload=work,
        ina=opts,
        capacity_gbps=10.0,
        seed=seed,
    )


def _placed(doc: dict, draw) -> dict:
    """The Clos network's task, to be placed by PARING on any free server."""
    task = doc["jobs"][0]["tasks"][0]
    task.update(placement="free", ps_aggregation_capacity_gbps=draw(st.sampled_from([10.0, 40.0])))
    for spec in doc["switches"]:
        if spec.get("ina") and draw(st.booleans()):
            spec["aggregation_capacity_gbps"] = draw(st.sampled_from([10.0, 20.0, 40.0]))
    return doc


def topology(scheme: str, limit: int, draw) -> dict:
    seed = draw(st.integers(0, 1000))
    if scheme in EDGE:  # EINA merges a rack at its aggregator: racks fit the limit
        return topogen.edge(
            aggregators=draw(st.integers(3, 6)),
            ps=draw(st.integers(1, 2)),
            workers_per_aggregator=(1, limit - 1),
            seed=seed,
        )
    if scheme in POOL:
        # Ports for every host, both ends of a chain of the switches and one spare: with fewer
        # no network of the pool connects the workers at all, which ATRO reports (exit 2).
        switches, max_ports = draw(st.integers(2, 4)), draw(st.integers(4, 6))
        return topogen.pool(
            switches=switches,
            max_ports=max_ports,
            workers=draw(st.integers(4, min(7, switches * max_ports - 2 * (switches - 1) - 2))),
            capacity_gbps=10.0,
            seed=seed,
        )
    doc = _clos(draw)
    return _placed(doc, draw) if scheme in PLACING else doc


def params(scheme: str, limit: int) -> dict:
    chosen = {"max_fan_in": limit}
    if any(p.name == "num_workers" for p in SCHEMES[scheme].params):
        chosen["num_workers"] = 1
    return chosen


def within_the_limit(network, plan, limit: int) -> None:
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    assert not result.beyond_data_plane, result.beyond_data_plane
    over = [(a.switch, a.pipeline, a.fan_in) for a in result.aggregator_loads if a.fan_in > limit]
    assert not over, over
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps >= tp.rate_gbps * (1 - 1e-9) - 1e-12, (tp.key, te.rate_gbps)
    assert plan.details["max_fan_in"] == limit
    compile_plan(network, plan)


def test_every_scheme_declares_the_data_plane_limit_as_its_default():
    for name, entry in SCHEMES.items():
        param = entry.param("max_fan_in")
        assert (param.kind, param.default, param.minimum) == ("integer", MAX_FAN_IN, 0), name


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@settings(
    max_examples=3,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), limit=st.integers(2, 4))
def test_the_default_plan_stays_within_the_limit(scheme, data, limit):
    network = build_network(topology(scheme, limit, data.draw))
    seed = data.draw(st.integers(0, 50))
    try:
        plan = solve(
            network,
            scheme,
            SolveOptions(seed=seed, time_limit=SECONDS, params=params(scheme, limit)),
        )
    except SchemeInputError as exc:  # only RR's routes that return to a switch may need it
        assert scheme == "rr" and "returns to it" in str(exc), exc
        return
    within_the_limit(network, plan, limit)
