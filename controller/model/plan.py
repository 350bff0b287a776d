"""The Plan: the one output of every scheme, and its stable JSON form.

Scripts outside the code read these JSON keys, so they are part of the product's interface:
top level `scheme`, `status`, `objective`, `bound`, `solve_seconds`, `seed`, `tasks`; each task
`job`, `task`, `ps`, `rate_gbps`, `paths` (worker → node list), `aggregation` (list of
`switch`, `pipeline`, `fan_in`, `next_hop`, optional `workers`), optional `model_share`
(`controller.evaluator.sharding`). Optional top-level `patch_panel`: the links a topology-choosing
scheme (ATRO) has the optical patch panel build, each `a` (a switch), `a_port`, `b` (a switch or a
host), `b_port` (null at a host: it has one port) and `capacity_gbps` (shared by both
directions); `ina solve --topology-out` writes them as a topology file. `PLAN_JSON_SCHEMA`
states them formally.

Semantics the evaluator and the compiler rely on: a path is the physical node list from the
worker to the PS. A task's flows that enter a switch through a pipeline listed in the task's
`aggregation` become one flow there, which leaves toward `next_hop`; everywhere else flows are
only forwarded. When a point lists `workers`, only flows carrying those workers' contributions
are merged there and the others cross the pipeline untouched: the data plane keys aggregation
by incoming flow, as GRID's <aggregation node, fragment> tags do. A point with `share` s < 1
(partial aggregation) merges only the fragments in [0, s) of what enters it; the other
fragments cross raw toward the same next hop (the evaluator counts fractional flows).

`load_plan` reads a plan file strictly (pydantic models of the schema, in strict mode: no
`2.9` truncated to a fan-in of 2, no NaN rate, no repeated task or aggregation point, no
patch-panel connection twice or to itself, no port of a node used twice, no unknown key), so
that a careless file is refused with the field it got wrong. Whether the plan fits a topology
is the evaluator's question, not the loader's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, FailFast, Field, ValidationError

from controller.model.inputs import InputError, parse_json, plain_error, read_text

# Flows one aggregation point can merge (the data plane's member bitmap, p4src/README.md): the
# schemes' default limit. The compiler refuses more; the evaluator reports them.
from dataplane.frame import MAX_FAN_IN  # noqa: F401

Status = Literal["optimal", "feasible", "timeout", "infeasible", "heuristic"]


@dataclass(frozen=True)
class AggregationPoint:
    """A task's flows entering `switch` through `pipeline` are summed into one flow.

    `workers`, when given, restricts the merge to flows made of those workers' contributions.
    """

    switch: str
    pipeline: int
    fan_in: int
    next_hop: str
    workers: tuple[str, ...] | None = None
    # Partial aggregation (PARING Sec. V-C, ATP's best effort): only the fragments in
    # [0, share) of the flows entering are merged, the others cross raw. 1: whole flows.
    share: float = 1.0

    def merges(self, worker: str) -> bool:
        return self.workers is None or worker in self.workers


@dataclass
class TaskPlan:
    job: str
    task: str
    ps: str
    rate_gbps: float
    paths: dict[str, list[str]]
    aggregation: list[AggregationPoint] = field(default_factory=list)
    # Fraction of the job's model this task's PS holds (EINA's sharding); None: all of it.
    model_share: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.job, self.task)

    def point_at(self, switch: str, pipeline: int) -> AggregationPoint | None:
        return next(
            (a for a in self.aggregation if a.switch == switch and a.pipeline == pipeline), None
        )


@dataclass(frozen=True)
class LinkLoad:
    src: str
    dst: str
    flows: int | float  # a fraction of a flow crosses where aggregation is partial
    load_gbps: float
    capacity_gbps: float


@dataclass
class Plan:
    scheme: str
    status: Status
    objective: float
    bound: float | None
    solve_seconds: float
    seed: int | None
    tasks: list[TaskPlan]
    topology: str = ""
    link_loads: list[LinkLoad] = field(default_factory=list)
    # Scheme-specific extras (LP value, quantization, stage times, ...).
    details: dict[str, Any] = field(default_factory=dict)
    # The network a topology-choosing scheme built (module docstring); None: the topology's.
    patch_panel: list[dict[str, Any]] | None = None

    @property
    def gap(self) -> float | None:
        """Relative gap between the objective and the proven bound (None without a bound)."""
        if self.bound is None:
            return None
        if self.bound <= 0:
            return 0.0
        return max(0.0, (self.bound - self.objective) / self.bound)

    def task(self, job: str, task: str) -> TaskPlan:
        for t in self.tasks:
            if t.key == (job, task):
                return t
        raise KeyError(f"plan has no task {job}/{task}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gap"] = self.gap
        for task in data["tasks"]:  # `share` only where aggregation is partial
            for point in task["aggregation"]:
                if point["share"] == 1.0:
                    del point["share"]
        data["link_loads"] = [
            {
                "from": ll.src,
                "to": ll.dst,
                "flows": ll.flows,
                "load_gbps": ll.load_gbps,
                "capacity_gbps": ll.capacity_gbps,
            }
            for ll in self.link_loads
        ]
        if self.patch_panel is None:
            del data["patch_panel"]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        tasks = [
            TaskPlan(
                job=t["job"],
                task=t["task"],
                ps=t["ps"],
                rate_gbps=float(t["rate_gbps"]),
                paths={w: list(p) for w, p in t["paths"].items()},
                aggregation=[_point(a) for a in t.get("aggregation", [])],
                model_share=None if t.get("model_share") is None else float(t["model_share"]),
            )
            for t in data["tasks"]
        ]
        loads = [
            LinkLoad(ll["from"], ll["to"], ll["flows"], ll["load_gbps"], ll["capacity_gbps"])
            for ll in data.get("link_loads", [])
        ]
        return cls(
            scheme=data["scheme"],
            status=data["status"],
            objective=data["objective"],
            bound=data.get("bound"),
            solve_seconds=data["solve_seconds"],
            seed=data.get("seed"),
            tasks=tasks,
            topology=data.get("topology", ""),
            link_loads=loads,
            details=data.get("details", {}),
            patch_panel=data.get("patch_panel"),
        )

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """The plan in a file, validated (`load_plan`)."""
        return load_plan(path)


def _point(data: dict[str, Any]) -> AggregationPoint:
    workers = data.get("workers")
    return AggregationPoint(
        data["switch"],
        int(data["pipeline"]),
        int(data["fan_in"]),
        data["next_hop"],
        tuple(workers) if workers is not None else None,
        float(data.get("share", 1.0)),
    )


class PlanFormatError(InputError):
    """A plan file that does not follow PLAN_JSON_SCHEMA."""


def load_plan(path: str | Path) -> Plan:
    """Load a plan file, strictly, with a user-facing error instead of a traceback."""
    source = str(path)
    return parse_plan(parse_json(read_text(path, PlanFormatError), source, PlanFormatError), source)


def parse_plan(data: Any, source: str = "<memory>") -> Plan:
    """Validate a parsed plan document (types, ranges, no repeated task or point) → `Plan`."""
    try:
        doc = _PlanFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in errors[0]["loc"])
        where = where.removeprefix(".")
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        problem = plain_error(errors[0])
        raise PlanFormatError(
            source, where or "top level", f"not a plan file: {problem}{more}"
        ) from None
    seen: set[tuple[str, str]] = set()
    for i, task in enumerate(doc.tasks):
        where = f"tasks[{i}] ({task.job}/{task.task})"
        if (task.job, task.task) in seen:
            raise PlanFormatError(source, where, "this job/task is planned twice")
        seen.add((task.job, task.task))
        points = [(a.switch, a.pipeline) for a in task.aggregation]
        for j, point in enumerate(points):
            if point in points[:j]:
                raise PlanFormatError(
                    source,
                    f"{where}.aggregation[{j}]",
                    f"{point[0]} pipeline {point[1]} is listed twice",
                )
    plan = Plan.from_dict(doc.model_dump(by_alias=True))
    for j, problem in panel_problems(plan.patch_panel or []):
        raise PlanFormatError(source, f"patch_panel[{j}]", problem)
    return plan


def panel_problems(panel: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(index, problem) of what makes a patch panel wrong on any topology: a node linked to
    itself, a pair linked twice (ATRO's (6): one link per pair), a port used twice."""
    problems: list[tuple[int, str]] = []
    pairs: dict[frozenset[str], int] = {}
    ports: dict[tuple[str, int], int] = {}
    for j, c in enumerate(panel):
        link = f"connection {c['a']}-{c['b']}"
        pair = frozenset((c["a"], c["b"]))
        if len(pair) == 1:
            problems.append((j, f"{link} links {c['a']} to itself"))
        elif pair in pairs:
            problems.append((j, f"{link} is listed twice (also patch_panel[{pairs[pair]}])"))
        else:
            pairs[pair] = j
            for node, port in ((c["a"], c["a_port"]), (c["b"], c["b_port"])):
                if port is not None and ports.setdefault((node, port), j) != j:
                    used = f"port {port} of {node} is already used by patch_panel"
                    problems.append((j, f"{link}: {used}[{ports[node, port]}]"))
    return problems


# The plan file's schema for validation; PLAN_JSON_SCHEMA below states the same for readers.
_MAX_PATHS = 1 << 16  # flow ids are 16 bits: no plan has more flows than that


def _bounded_paths(value: Any) -> Any:
    if isinstance(value, dict) and len(value) > _MAX_PATHS:
        raise ValueError(f"{len(value)} paths; a task has at most {_MAX_PATHS} workers")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


Name = Annotated[str, Field(min_length=1)]


class _PointFile(_Strict):
    switch: Name
    pipeline: int = Field(ge=0)
    fan_in: int = Field(ge=1)
    next_hop: Name
    workers: list[Name] | None = Field(default=None, fail_fast=True)
    share: float = Field(default=1.0, gt=0, le=1)


class _TaskFile(_Strict):
    job: Name
    task: Name
    ps: Name
    rate_gbps: float = Field(ge=0)
    paths: Annotated[dict[Name, Annotated[list[Name], FailFast()]], BeforeValidator(_bounded_paths)]
    aggregation: Annotated[list[_PointFile], FailFast()] = []
    model_share: float | None = Field(default=None, ge=0, le=1)


class _LinkLoadFile(_Strict):
    model_config = ConfigDict(populate_by_name=True)
    src: str = Field(alias="from")
    dst: str = Field(alias="to")
    flows: float = Field(ge=0)  # fractional under partial aggregation (`share`)
    load_gbps: float = Field(ge=0)
    capacity_gbps: float = Field(ge=0)


class _ConnectionFile(_Strict):
    a: Name
    a_port: int = Field(ge=1)
    b: Name
    b_port: int | None = Field(ge=1)
    capacity_gbps: float = Field(gt=0)


class _PlanFile(_Strict):
    scheme: str
    status: Status
    objective: float
    bound: float | None
    gap: float | None = None
    solve_seconds: float = Field(ge=0)
    seed: int | None
    topology: str = ""
    tasks: Annotated[list[_TaskFile], FailFast()] = Field(min_length=1)
    link_loads: Annotated[list[_LinkLoadFile], FailFast()] = []
    details: dict[str, Any] = {}
    patch_panel: list[_ConnectionFile] | None = Field(default=None, fail_fast=True)


_AGGREGATION = {
    "type": "object",
    "required": ["switch", "pipeline", "fan_in", "next_hop"],
    "properties": {
        "switch": {"type": "string"},
        "pipeline": {"type": "integer", "minimum": 0},
        "fan_in": {"type": "integer", "minimum": 1},
        "next_hop": {"type": "string"},
        "workers": {"type": ["array", "null"], "items": {"type": "string"}},
        "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    },
}

PLAN_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "INA routing plan",
    "type": "object",
    "required": ["scheme", "status", "objective", "bound", "solve_seconds", "seed", "tasks"],
    "properties": {
        "scheme": {"type": "string"},
        "status": {"enum": ["optimal", "feasible", "timeout", "infeasible", "heuristic"]},
        "objective": {"type": "number"},
        "bound": {"type": ["number", "null"]},
        "gap": {"type": ["number", "null"]},
        "solve_seconds": {"type": "number", "minimum": 0},
        "seed": {"type": ["integer", "null"]},
        "topology": {"type": "string"},
        "tasks": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["job", "task", "ps", "rate_gbps", "paths", "aggregation"],
                "properties": {
                    "job": {"type": "string"},
                    "task": {"type": "string"},
                    "ps": {"type": "string"},
                    "rate_gbps": {"type": "number", "minimum": 0},
                    "paths": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                        },
                    },
                    "aggregation": {"type": "array", "items": _AGGREGATION},
                    "model_share": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                },
            },
        },
        "link_loads": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["from", "to", "flows", "load_gbps", "capacity_gbps"],
            },
        },
        "details": {"type": "object"},
        "patch_panel": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["a", "a_port", "b", "b_port", "capacity_gbps"],
                "properties": {
                    "a": {"type": "string"},
                    "a_port": {"type": "integer", "minimum": 1},
                    "b": {"type": "string"},
                    "b_port": {"type": ["integer", "null"], "minimum": 1},
                    "capacity_gbps": {"type": "number", "exclusiveMinimum": 0},
                },
            },
        },
    },
}
