"""Every scheme, run on mutated versions of its own example topologies, either refuses the input
with the project's one-paragraph error or returns a plan the independent evaluator confirms:
consistent (no path, merge point or capacity the plan gets wrong), every task's rate carried by
its paths, and a bound never below the objective.

Mutations are the fields a scheme reads and a careless user changes: aggregation capacities of
switches and hosts (0 included), pipelines, INA flags, DCN ingress/egress capacities, link
capacities per direction, a task's rate cap and PS capacity, its worker list, a worker cabled
straight to its PS, and the scheme's own parameters (drawn within their declared ranges).
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import note as hypothesis_note
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from controller.evaluator.evaluate import evaluate
from controller.model.inputs import InputError
from controller.model.network import build_network
from controller.model.topogen import pool
from controller.solvers import SchemeInputError, SolveOptions, scheme_names, solve
from controller.solvers.catalog import SCHEMES, Param

EXAMPLES = Path(__file__).resolve().parents[1] / "topologies" / "examples"
TIME_LIMIT = 5.0

# Each scheme on the examples written for its paper (a baseline on those of the paper that
# compares with it).
FAMILIES = {
    "aro": ["aro-fig1", "aro-fig3"],
    "eina": ["eina-fig1", "eina-2ps"],
    "grid": ["grid-fig1"],
    "paring": ["paring-fig1", "paring-2ps", "paring-fine"],
}
BASELINE_EXAMPLES = {
    "shortest": "aro-fig1",
    "atp": "grid-fig1",
    "random": "aro-fig3",
    "switchml": "grid-fig1",
    "geryon": "grid-fig1",
    "aggtree": "aro-fig1",
    "rr": "eina-fig1",
    "deepsys": "paring-fig1",
    "deepsys-atp": "paring-fig1",
    "deepsys-soar": "paring-fig1",
    "marina": "paring-fig1",
    "panama": "paring-fig1",
    "spar": "aro-fig1",
}


def _examples(scheme: str) -> list[str]:
    if scheme in BASELINE_EXAMPLES:
        return [BASELINE_EXAMPLES[scheme]]
    return FAMILIES[scheme.split("-")[0]]


def _document(name: str) -> dict:
    if name == "pool":
        return pool(switches=3, max_ports=4, workers=3, capacity_gbps=10.0)
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


CAPACITIES = [None, 0, 0.001, 0.1, 0.5, 1, 3, 10, 100]


@st.composite
def mutation(draw, doc: dict, params: tuple[Param, ...]):
    """One change to `doc` (in place); returns a line saying what it was, or a parameter."""
    switches, hosts, links = doc["switches"], doc["hosts"], doc["links"]
    tasks = [t for job in doc.get("jobs", []) for t in job["tasks"]]
    kind = draw(st.sampled_from(["switch", "switch", "host", "link", "task", "cable", "param"]))
    if kind == "param" and params:
        param = draw(st.sampled_from(params))
        return ("param", param.name, draw(_valid_value(param)))
    if kind == "switch":
        sw = draw(st.sampled_from(switches))
        key = draw(
            st.sampled_from(
                [
                    "aggregation_capacity_gbps",
                    "pipelines",
                    "ina",
                    "ingress_capacity_gbps",
                    "egress_capacity_gbps",
                    "aggregates",
                ]
            )
        )
        value = {
            "pipelines": st.integers(1, 4),
            "ina": st.booleans(),
            "aggregates": st.sampled_from(["all", "addressed"]),
        }.get(key, st.sampled_from(CAPACITIES))
        return _set(sw, key, draw(value))
    if kind == "host":
        host = draw(st.sampled_from(hosts))
        return _set(host, "aggregation_capacity_gbps", draw(st.sampled_from(CAPACITIES)))
    if kind == "link":
        link = draw(st.sampled_from(links))
        key = draw(st.sampled_from(["capacity_gbps", "reverse_capacity_gbps"]))
        return _set(
            link,
            key,
            draw(st.sampled_from(CAPACITIES[2:] if key == "capacity_gbps" else CAPACITIES)),
        )
    if kind == "task" and tasks:
        task = draw(st.sampled_from(tasks))
        key = draw(st.sampled_from(["rate_cap_gbps", "ps_aggregation_capacity_gbps", "workers"]))
        if key == "workers":
            if len(task["workers"]) < 2:
                return "nothing"
            gone = draw(st.sampled_from(task["workers"]))
            task["workers"] = [w for w in task["workers"] if w != gone]
            return f"{task['name']} without {gone}"
        return _set(task, key, draw(st.sampled_from(CAPACITIES)))
    if kind == "cable" and tasks:
        task = draw(st.sampled_from(tasks))
        worker = draw(st.sampled_from(task["workers"]))
        links.append(
            {"a": worker, "b": task["ps"], "capacity_gbps": draw(st.sampled_from(CAPACITIES[2:]))}
        )
        return f"{worker} cabled to {task['ps']}"
    return "nothing"


def _set(item: dict, key: str, value) -> str:
    if value is None:
        item.pop(key, None)
    else:
        item[key] = value
    return f"{item.get('name', item.get('a'))}.{key} = {value}"


def _valid_value(param: Param):
    if param.kind == "flag":
        return st.booleans()
    if param.kind == "choice":
        return st.sampled_from(param.choices)
    if param.kind == "text":
        return st.sampled_from(["grid", "atp,rr", "grid,atp,rr,random,aggtree"])
    low = param.minimum if param.minimum is not None else 0
    if param.kind == "integer":
        high = min(param.maximum if param.maximum is not None else low + 8, low + 8)
        if param.name in ("num_workers", "quantization", "draws", "rounds"):
            high = min(high, low + 3)  # more costs time, not coverage
        return st.integers(int(low) + (1 if param.above_minimum else 0), int(high))
    values = [v for v in (1e-9, 0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 10.0, 100.0) if param.accepts(v)]
    return st.sampled_from(values)


def note(text: str) -> None:
    """A line for hypothesis's report of a failing example (nothing outside hypothesis)."""
    with contextlib.suppress(InvalidArgument):
        hypothesis_note(text)


def _judge(scheme: str, doc: dict, params: dict) -> None:
    try:
        network = build_network(doc, "mutated.yaml")
        plan = solve(network, scheme, SolveOptions(time_limit=TIME_LIMIT, seed=1, params=params))
    except (InputError, SchemeInputError) as exc:
        message = str(exc)
        assert "\n" not in message and "Traceback" not in message, message
        note(f"refused: {message[:300]}")
        return
    note(f"plan: {plan.status} objective {plan.objective} bound {plan.bound}")
    if not plan.tasks:
        assert plan.status in ("infeasible", "timeout", "heuristic"), plan.status
        return
    ev = evaluate(network, plan)
    assert ev.consistent, ev.problems[:5]
    for tp, te in zip(plan.tasks, ev.tasks, strict=True):
        assert tp.rate_gbps <= te.rate_gbps * (1 + 1e-6) + 1e-9, (
            tp.task,
            tp.rate_gbps,
            te.rate_gbps,
        )
    if plan.bound is not None:
        assert plan.bound >= plan.objective * (1 - 1e-9) - 1e-9


def _fuzz(scheme: str, examples: int):
    params = SCHEMES[scheme].params

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(st.data())
    def run(data) -> None:
        name = data.draw(st.sampled_from(["pool"] if scheme == "atro" else _examples(scheme)))
        doc = copy.deepcopy(_document(name))
        given_params: dict = {}
        for _ in range(data.draw(st.integers(1, 3))):
            change = data.draw(mutation(doc, params))
            if isinstance(change, tuple):
                given_params[change[1]] = change[2]
            note(f"{name}: {change}")
        _judge(scheme, doc, given_params)

    return run


@pytest.mark.parametrize("scheme", scheme_names())
def test_every_accepted_plan_carries_what_it_claims(scheme):
    _fuzz(scheme, 12)()


def _ps_capacity(doc: dict, value: float) -> str:
    ps = doc["jobs"][0]["tasks"][0]["ps"]
    next(h for h in doc["hosts"] if h["name"] == ps)["aggregation_capacity_gbps"] = value
    return f"PS aggregates {value}"


def _rate_cap(doc: dict, value: float) -> str:
    for job in doc["jobs"]:
        for task in job["tasks"]:
            task["rate_cap_gbps"] = value
    return f"rate cap {value}"


@pytest.mark.parametrize(
    "change",
    [(_ps_capacity, 0), (_ps_capacity, 0.1), (_rate_cap, 0), (_rate_cap, 0.3)],
    ids=["ps-capacity-0", "ps-capacity-0.1", "rate-cap-0", "rate-cap-0.3"],
)
@pytest.mark.parametrize("scheme", scheme_names())
def test_a_ps_capacity_or_rate_cap_is_charged_as_the_evaluator_does(scheme, change):
    """Every scheme on each of its examples: the PS's aggregation capacity and a task's rate
    cap bound the plan's rate, or the scheme refuses the input in one paragraph."""
    set_value, value = change
    for name in ["pool"] if scheme == "atro" else _examples(scheme):
        doc = copy.deepcopy(_document(name))
        set_value(doc, value)
        _judge(scheme, doc, {})
