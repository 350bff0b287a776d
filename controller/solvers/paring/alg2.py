"""Alg. 2 for one PS: steps 1-3 and line 23, shared by `paring`, `paring-opt` and the
several-PS extension (several.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.model.network import Network, Task
from controller.solvers import SchemeInputError
from controller.solvers.paring import degrees
from controller.solvers.paring.degrees import Rate
from controller.solvers.paring.logical import Logical, convert
from controller.solvers.paring.routes import aggregating_children
from controller.solvers.paring.steiner import Tree, steiner_tree

SLACKS = (1.0, 1.5, math.inf)  # Alg. 3's degree slack, tried in turn (steiner.py)


@dataclass
class Outcome:
    """What Alg. 2 found for one task."""

    logical: Logical
    tree: Tree
    rate: Rate  # line 23
    step2_rate: Rate  # r_2
    slack: float


def run_paring(network: Network, task: Task, as_printed: bool = False, fan_in: int = 0) -> Outcome:
    """Alg. 2: step 1 (PS), step 2 (r, d), step 3 (Alg. 3), line 23; a switch takes at most
    `fan_in` children (0: unlimited)."""
    g = convert(network, task, fan_in)  # Alg. 1
    n = len(task.workers)
    return grow(g, degrees.select_ps(g, n), n, as_printed)


def grow(
    g: Logical, ps: str, n: int, as_printed: bool = False, load: dict | None = None
) -> Outcome:
    """Alg. 2 steps 2-3 and line 23 for a chosen PS: r_2 and d(v), the tree, its rate."""
    r2, d = degrees.rate_and_degrees(g, ps, n)
    for slack in SLACKS:
        tree = steiner_tree(g, ps, d, n, slack, not as_printed, load)  # line 22
        if tree is not None:
            break
    else:
        raise SchemeInputError(
            f"{g.network.source}: PARING found no aggregation tree for "
            f"{g.task.job}/{g.task.name} (the free servers do not connect)"
        )
    rate = degrees.tree_rate(g, ps, aggregating_children(tree))  # line 23
    return Outcome(g, tree, rate, r2, slack)
