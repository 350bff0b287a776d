"""Which flows an aggregator's capacity is charged for: the `aggregates` switch field.

* `addressed` (the default; ARO, GRID, ATP): a switch merges only the flows the plan marks
  for it (its aggregation points); other flows cross it for free.
* `all` (EINA's edge aggregators, Sec. III-B constraint (10)): every flow of a task entering
  the aggregator, its local workers' included, is merged there and counts against c_j. A plan
  that lets a flow pass such a switch unmerged is still charged for it: the hardware cannot
  tell it apart. Links carry what the plan routes, so this never scores a plan above what it
  can do.

Kept apart from the evaluator so that the one rule EINA changes sits in one place.
"""

from __future__ import annotations

from collections import defaultdict

from controller.model.network import Network


def aggregator_charges(
    network: Network,
    link_flows: dict[tuple[str, str], float],
    aggregator_inflows: dict[tuple[str, int], float],
) -> dict[str, float]:
    """Per switch, how many of one task's flows its aggregation capacity must process."""
    charges: defaultdict[str, float] = defaultdict(int)
    for (sw, _pipe), n in aggregator_inflows.items():
        if not merges_all(network, sw):
            charges[sw] += n
    for (_u, v), n in link_flows.items():
        if merges_all(network, v):
            charges[v] += n
    return dict(charges)


def merges_all(network: Network, node: str) -> bool:
    return network.is_switch(node) and network.switch_spec(node).aggregates == "all"
