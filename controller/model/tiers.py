"""Where each node sits in a picture of the network: tiers stacked top-down.

Spines and cores on top, hosts at the bottom, so that up-down routes read as they do in the
papers' figures. Shared by `ina show` (matplotlib) and the API's status page (an SVG drawn in
the browser from `GET /topology`), which therefore draw the same picture.
"""

from __future__ import annotations

from controller.model.network import Network

_LEVEL = {"core": 4, "spine": 4, "aggregation": 3, "leaf": 2, "tor": 2, "edge": 2, "other": 3}


def level(network: Network, node: str) -> int:
    """0 for a host, else its switch tier's row (higher is further up)."""
    if not network.is_switch(node):
        return 0
    return _LEVEL[network.switch_spec(node).tier]


def layout(network: Network) -> dict[str, tuple[float, float]]:
    """Nodes of one level spread evenly on one row (x in 0..1, y the level); hosts ordered
    under their switch."""
    rows: dict[int, list[str]] = {}
    order = {n: i for i, n in enumerate(network.graph.nodes)}
    for node in network.graph.nodes:
        rows.setdefault(level(network, node), []).append(node)
    if 0 in rows:

        def attach(host: str) -> int:
            return min((order[s] for s in network.graph.successors(host)), default=0)

        rows[0].sort(key=lambda h: (attach(h), order[h]))
    pos = {}
    for row, nodes in rows.items():
        for i, node in enumerate(nodes):
            pos[node] = ((i + 0.5) / len(nodes), float(row))
    return pos
