"""Every scheme in one table: where its code is, its paper, its default time limit and its
parameters, each with a type, a default and a meaning.

This is the one definition that `ina solve --param` and a topology's `schemes:` section are
checked against (`check`), that `ina schemes [NAME]` and `ina solve --help` print, and that
`controller.solvers.get_solver` loads schemes from. A parameter whose default depends on the
network (a PS's bandwidth, the number of switches) has `default=None` and says what it is in
`default_text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from controller.model.plan import MAX_FAN_IN

Kind = Literal["integer", "number", "flag", "choice", "text"]


@dataclass(frozen=True)
class Param:
    name: str
    kind: Kind
    default: Any
    meaning: str
    minimum: float | None = None
    maximum: float | None = None
    # the minimum itself is not allowed (a rate step, a weight above 0)
    above_minimum: bool = False
    choices: tuple[str, ...] = ()
    # what the default is when it depends on the network (default None)
    default_text: str = ""

    def shown_default(self) -> str:
        if self.default is None:
            return self.default_text or "none"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    def wanted(self) -> str:
        """What a value must be, in words."""
        if self.kind == "flag":
            return "true or false"
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        if self.kind == "text":
            return "a text"
        noun = "an integer" if self.kind == "integer" else "a number"
        low = (
            ""
            if self.minimum is None
            else (f" above {self.minimum:g}" if self.above_minimum else f" from {self.minimum:g}")
        )
        high = (
            ""
            if self.maximum is None
            else (
                f" to {self.maximum:g}"
                if low and not self.above_minimum
                else f" and at most {self.maximum:g}"
                if low
                else f" at most {self.maximum:g}"
            )
        )
        return noun + low + high

    def accepts(self, value: Any) -> bool:
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "text":
            return isinstance(value, str)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.kind == "integer" and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.minimum is not None and (
            value <= self.minimum if self.above_minimum else value < self.minimum
        ):
            return False
        return self.maximum is None or value <= self.maximum


@dataclass(frozen=True)
class Scheme:
    name: str
    target: str  # "module:function"
    paper: str
    summary: str
    params: tuple[Param, ...] = ()
    # seconds when --time-limit is not given; None: the scheme runs to its end
    time_limit: float | None = None
    # a topology section this scheme also reads (the family's shared one)
    shares: str | None = None
    # chooses which candidate links of a reconfigurable pool to build (ATRO)
    builds_network: bool = False

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


ARO_PAPER = (
    "Releasing the Power of In-Network Aggregation With Aggregator-Aware Routing Optimization (ARO)"
)
EINA_PAPER = (
    "Maximizing the Throughput of Edge-Based In-Network Aggregation With Routing "
    "Optimization (EINA)"
)
GRID_PAPER = "GRID: Gradient Routing with In-network Aggregation for Distributed Training"
PARING_PAPER = (
    "PARING: Joint Task Placement and Routing for Distributed Training With In-Network Aggregation"
)
ATRO_PAPER = (
    "Pushing the Performance Boundary of In-Network AllReduce With Joint Topology "
    "and Routing Optimization (ATRO)"
)

THREADS = Param("num_workers", "integer", 2, "CP-SAT search threads", 1, 64)
# The data plane's limit (dataplane/frame.py); the papers' models have none.
FAN_IN = Param(
    "max_fan_in",
    "integer",
    MAX_FAN_IN,
    "flows one aggregation point merges; 0: unlimited, the paper's model",
    0,
)


def _aro_params(levels: int, alpha: bool = False) -> tuple[Param, ...]:
    params: tuple[Param, ...] = (
        # beyond 10^6 levels the grid's integer domains only cost time
        Param(
            "quantization",
            "integer",
            levels,
            "N of QSR: rate levels of the variable-rate model's grid (aro-raw: 0.01 % of "
            "the rate ceiling)",
            1,
            1_000_000,
        ),
        Param(
            "bidirectional",
            "flag",
            False,
            "let a worker's path go down and up again (not only up-down)",
        ),
        THREADS,
        FAN_IN,
        Param(
            "mu",
            "number",
            0.001,
            "μ of Eq. (1): the weight of the total rate against the max-min rate",
            0,
            0.5,
            above_minimum=True,
        ),
    )
    if alpha:
        params += (
            Param(
                "alpha",
                "number",
                0.6,
                "α of APP: the share of aggregators kept",
                0,
                1,
                above_minimum=True,
            ),
        )
    return params


_EINA_SHARED = (
    Param("r_min", "number", 0.0, "r_p^L of (1), Gbps (a whole number of rate steps)", 0),
    Param(
        "r_max",
        "number",
        None,
        "r_p^U of (1), Gbps; the PS's own link always caps r_p",
        0,
        default_text="none",
    ),
    Param(
        "depth_limit",
        "integer",
        None,
        "d* of (4): the deepest a routing tree may be",
        1,
        default_text="the number of aggregators |A|",
    ),
    FAN_IN,
)


def _eina_params(step: float) -> tuple[Param, ...]:
    return (
        *_EINA_SHARED,
        Param(
            "step", "number", step, "the rate grid of the model, Gbps", 0, 1e6, above_minimum=True
        ),
        THREADS,
    )


_GRID_LINKS = "model link capacities as rows of the LP (true) or not"
_GRID = (
    Param(
        "candidates",
        "choice",
        "all",
        "aggregation candidates: every INA switch on some path, or those on shortest paths",
        choices=("all", "shortest"),
    ),
    Param("draws", "integer", 16, "randomized-rounding draws", 1, 100_000),
    Param(
        "max_rate_gbps",
        "number",
        None,
        "T of GRID's Table 1, Gbps",
        1e-9,
        1e9,
        default_text="the PS's ingress bandwidth",
    ),
    FAN_IN,
)

_PARING = (
    Param(
        "gradient_gb", "number", 1.0, "b: the gradient size, GB, for the traffic volume", 1e-9, 1e9
    ),
    Param("as_printed", "flag", False, "run Algorithm 1 as printed, not as corrected"),
    Param("fine", "flag", False, "Sec. V-C's fine mode: switches merge a share, the rest goes raw"),
    FAN_IN,
)

_BASELINE = "a baseline the papers compare with"

SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme(
            "aro",
            "controller.solvers.aro.solver:solve_aro",
            ARO_PAPER,
            "aggregator-aware up-down routing on Clos networks, exact with a proven bound",
            _aro_params(100),
            120.0,
        ),
        Scheme(
            "aro-acc",
            "controller.solvers.aro.solver:solve_acc",
            ARO_PAPER,
            "ARO with both accelerations (SRO and APP)",
            _aro_params(100, alpha=True),
            120.0,
        ),
        Scheme(
            "aro-sro",
            "controller.solvers.aro.solver:solve_sro",
            ARO_PAPER,
            "ARO with SRO: INA-agnostic spines dropped, then unused links",
            _aro_params(100),
            120.0,
        ),
        Scheme(
            "aro-app",
            "controller.solvers.aro.solver:solve_app",
            ARO_PAPER,
            "ARO with APP: a share α of each group's INA switches kept",
            _aro_params(100, alpha=True),
            120.0,
        ),
        Scheme(
            "aro-qsr",
            "controller.solvers.aro.solver:solve_qsr",
            ARO_PAPER,
            "ARO's model on QSR's quantized rates",
            _aro_params(100),
            120.0,
        ),
        Scheme(
            "aro-raw",
            "controller.solvers.aro.solver:solve_raw",
            ARO_PAPER,
            "ARO's variable-rate model on a fine grid",
            _aro_params(10_000),
            120.0,
        ),
        Scheme(
            "eina",
            "controller.solvers.eina.solver:solve_eina",
            EINA_PAPER,
            "routing trees per PS over edge aggregators (0.01 Gbps rate grid)",
            _eina_params(0.01),
            60.0,
        ),
        Scheme(
            "eina-iqcp",
            "controller.solvers.eina.solver:solve_iqcp",
            EINA_PAPER,
            "EINA's IQCP (1 Gbps rate grid)",
            _eina_params(1.0),
            60.0,
            shares="eina",
        ),
        Scheme(
            "eina-plus",
            "controller.solvers.eina_plus.solver:solve_plus",
            EINA_PAPER,
            "EINA plus bypass, never below EINA's, GRID's, ATP's or RR's plan",
            (
                *_eina_params(0.01),
                Param(
                    "candidates",
                    "text",
                    "grid,atp,rr",
                    "baselines it compares with, "
                    "comma-separated, from grid, atp, rr, random, aggtree",
                ),
            ),
            60.0,
            shares="eina",
        ),
        Scheme(
            "eina-fast",
            "controller.solvers.eina_fast.solver:solve_fast",
            EINA_PAPER,
            "EINA's problem at 1,000 aggregators: greedy trees, LP rates, proven gap",
            _EINA_SHARED,
            60.0,
            shares="eina",
        ),
        Scheme(
            "grid",
            "controller.solvers.grid.rgria:solve",
            GRID_PAPER,
            "R-GRIA: LP relaxation and randomized rounding",
            (
                Param(
                    "links", "flag", None, _GRID_LINKS, default_text="both, the better plan kept"
                ),
                *_GRID,
            ),
        ),
        Scheme(
            "grid-opt",
            "controller.solvers.grid.opt:solve",
            GRID_PAPER,
            "GRID's problem (1) solved exactly",
            (
                Param("links", "flag", True, _GRID_LINKS),
                *_GRID,
                Param("num_workers", "integer", 1, "CP-SAT search threads", 1, 64),
            ),
            60.0,
            shares="grid",
        ),
        Scheme(
            "paring",
            "controller.solvers.paring.solver:solve_paring",
            PARING_PAPER,
            "places a `placement: free` task and routes it on a degree-constrained Steiner tree",
            _PARING,
        ),
        Scheme(
            "paring-opt",
            "controller.solvers.paring.solver:solve_paring_opt",
            PARING_PAPER,
            "PARING's problem (1) solved exactly from PARING's tree",
            (*_PARING, THREADS),
            30.0,
        ),
        Scheme(
            "atro",
            "controller.solvers.atro.solver:solve_atro",
            ATRO_PAPER,
            "chooses which candidate links of a reconfigurable pool to build, and the routing",
            (
                Param(
                    "formulation",
                    "choice",
                    "aggregated",
                    "how the model counts flows",
                    choices=("aggregated", "classes", "workers"),
                ),
                Param(
                    "layers",
                    "integer",
                    None,
                    "L: tree layers",
                    1,
                    default_text="min(5, number of switches)",
                ),
                FAN_IN,
                THREADS,
                Param(
                    "symmetry",
                    "choice",
                    "none",
                    "symmetry-breaking cuts",
                    choices=("none", "switches", "all"),
                ),
            ),
            60.0,
            builds_network=True,
        ),
        Scheme(
            "shortest",
            "controller.solvers.baselines.shortest:solve",
            _BASELINE,
            "every worker on a shortest path (ECMP draw), no in-network aggregation",
            (FAN_IN,),
        ),
        Scheme(
            "atp",
            "controller.solvers.baselines.atp:solve_atp",
            _BASELINE,
            "ATP: ECMP routes, aggregation at the first INA switch and the PS-side switch",
            (
                Param(
                    "levels",
                    "choice",
                    "first",
                    "aggregate at the first INA switch (ATP) or at every one on the path",
                    choices=("first", "all"),
                ),
                Param("ps_side", "flag", True, "aggregate again at the PS-side switch (two-level)"),
                Param(
                    "partial",
                    "flag",
                    False,
                    "best effort per fragment: a full switch merges a share and forwards the rest",
                ),
                FAN_IN,
            ),
        ),
        Scheme(
            "random",
            "controller.solvers.baselines.atp:solve_random",
            _BASELINE,
            "ARO's RANDOM: ECMP through a drawn top-tier INA switch, merging at every INA switch",
            (FAN_IN,),
        ),
        Scheme(
            "switchml",
            "controller.solvers.baselines.atp:solve_switchml",
            _BASELINE,
            "SwitchML: rack-scale aggregation at each worker's own switch",
            (FAN_IN,),
        ),
        Scheme(
            "geryon",
            "controller.solvers.baselines.geryon:solve",
            _BASELINE,
            "Geryon: no INA, each gradient on the least congested short path",
            (
                Param(
                    "slack", "integer", 1, "hops a path may be longer than the shortest", 0, 1_000
                ),
                FAN_IN,
            ),
        ),
        Scheme(
            "aggtree",
            "controller.solvers.baselines.aggtree:solve",
            _BASELINE,
            "AggTree's greedy aggregation tree",
            (FAN_IN,),
        ),
        Scheme(
            "rr",
            "controller.solvers.baselines.rr:solve",
            _BASELINE,
            "EINA's random routing baseline with multi-aggregation",
            (FAN_IN,),
        ),
        Scheme(
            "deepsys",
            "controller.solvers.baselines.placing:solve_deepsys",
            _BASELINE,
            "the DeepSys tree, no INA",
            (FAN_IN,),
        ),
        Scheme(
            "deepsys-atp",
            "controller.solvers.baselines.placing:solve_deepsys_atp",
            _BASELINE,
            "the DeepSys tree, aggregation at each worker's first programmable switch",
            (FAN_IN,),
        ),
        Scheme(
            "deepsys-soar",
            "controller.solvers.baselines.placing:solve_deepsys_soar",
            _BASELINE,
            "SOAR's dynamic programme on the DeepSys tree",
            (
                Param(
                    "k",
                    "integer",
                    None,
                    "the most INA switches SOAR may choose",
                    0,
                    10**9,
                    default_text="all switches",
                ),
                FAN_IN,
            ),
        ),
        Scheme(
            "marina",
            "controller.solvers.baselines.placing:solve_marina",
            _BASELINE,
            "MARINA: a vertex-weighted Steiner tree, reshaped to balance switch load",
            (
                Param(
                    "ina_weight",
                    "number",
                    0.5,
                    "the weight of an INA switch in the Steiner tree (others weigh 1)",
                    1e-6,
                    1e6,
                ),
                Param("rounds", "integer", 8, "reshaping rounds", 0, 10_000),
                FAN_IN,
            ),
        ),
        Scheme(
            "panama",
            "controller.solvers.baselines.placing:solve_panama",
            _BASELINE,
            "PANAMA: workers round-robin over one aggregation tree per top-tier switch",
            (FAN_IN,),
        ),
        Scheme(
            "spar",
            "controller.solvers.baselines.spar:solve",
            _BASELINE,
            "SPAR's greedy aggregator placement with shortest paths",
            (
                Param(
                    "aggregators",
                    "integer",
                    None,
                    "aggregators to place",
                    0,
                    10**9,
                    default_text="every candidate",
                ),
                FAN_IN,
            ),
        ),
    )
}
