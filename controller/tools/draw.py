"""`ina show`: a picture of the topology, tiers stacked top-down, with a plan's paths on it.

Nodes are laid out by tier (`controller.model.tiers`, shared with the API's status page); INA
switches are filled, aggregation points are ringed and labelled with their fan-in, and each
task's paths get one colour.

With a plan, hosts are coloured by the plan's roles (a PS a placing scheme chose, workers, and
hosts the plan leaves unused), not the topology file's; on a reconfigurable pool the links the
plan's patch panel builds are drawn solid and the candidates it left out dotted. Large networks
keep their switch labels (host labels only up to `HOST_LABELS` nodes); an output ending in .svg
is a vector drawing whose labels stay text, to zoom into and search.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import networkx as nx

from controller.model.network import Network
from controller.model.plan import Plan
from controller.model.tiers import layout

HOST_LABELS = 80  # beyond this many nodes host labels overlap; switch labels stay
ROLE_COLOUR = {"worker": "#4c9be8", "ps": "#e8744c", "idle": "#dddddd", "unused": "#f4f4f4"}


def host_roles(network: Network, plan: Plan | None) -> dict[str, str]:
    """Each host's role: the topology's without a plan; with one, what the plan makes of it
    (its PSs and workers, wherever a placing scheme put them; every other host unused)."""
    if plan is None:
        return {h: network.role(h) for h in network.hosts}
    roles = dict.fromkeys(network.hosts, "unused")
    for tp in plan.tasks:
        roles.update(dict.fromkeys(tp.paths, "worker"))
    for tp in plan.tasks:
        roles[tp.ps] = "ps"
    return roles


def link_kinds(network: Network, plan: Plan | None) -> dict[tuple[str, str], str]:
    """Each undirected link (sorted ends): "link", or on a plan with a patch panel "built"
    and "not built" (a candidate of the pool the plan left out)."""
    links = {tuple(sorted(e)) for e in network.graph.edges}
    if plan is None or plan.patch_panel is None:
        return dict.fromkeys(links, "link")
    built = {tuple(sorted((c["a"], c["b"]))) for c in plan.patch_panel}
    return {e: "built" if e in built else "not built" for e in links}


def draw(network: Network, plan: Plan | None, out: str | Path) -> None:
    graph = network.graph.to_undirected(as_view=True)
    pos = layout(network)
    width = max(8.0, 0.35 * len(network.hosts))
    fig, ax = plt.subplots(figsize=(min(width, 40.0), 6.0))
    kinds = link_kinds(network, plan)
    for kind, colour, style in (
        ("link", "#cccccc", "solid"),
        ("not built", "#dddddd", "dotted"),
        ("built", "#555555", "solid"),
    ):
        edges = sorted(e for e, k in kinds.items() if k == kind)
        if edges:
            nx.draw_networkx_edges(
                graph, pos, edgelist=edges, ax=ax, edge_color=colour, width=1.0, style=style
            )
    roles = host_roles(network, plan)
    hosts = network.hosts
    nx.draw_networkx_nodes(
        graph,
        pos,
        nodelist=hosts,
        ax=ax,
        node_shape="s",
        node_size=220,
        node_color=[ROLE_COLOUR[roles[h]] for h in hosts],
        edgecolors="#999999",
        linewidths=0.5,
    )
    switches = network.switches
    nx.draw_networkx_nodes(
        graph,
        pos,
        nodelist=switches,
        ax=ax,
        node_size=420,
        node_color=["#2e7d32" if network.is_ina(s) else "#ffffff" for s in switches],
        edgecolors="#333333",
    )
    labelled = list(pos) if len(pos) <= HOST_LABELS else switches
    nx.draw_networkx_labels(
        graph, {n: pos[n] for n in labelled}, labels={n: n for n in labelled}, ax=ax, font_size=7
    )
    if plan is not None:
        _draw_plan(network, plan, pos, ax)
    legend = "filled: INA switch, square: host, orange: PS"
    if plan is not None:
        legend += ", pale: unused by the plan"
    if plan is not None and plan.patch_panel is not None:
        legend += ", dotted: candidate not built"
    ax.set_title(f"{network.name}" + (f" - {plan.scheme} plan" if plan else "") + f"   ({legend})")
    ax.axis("off")
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG labels stay text
        fig.savefig(out, dpi=130)
    plt.close(fig)


def _draw_plan(network: Network, plan: Plan, pos: dict, ax) -> None:
    colours = plt.get_cmap("tab10")
    for i, tp in enumerate(plan.tasks):
        colour = colours(i % 10)
        edges = {(u, v) for path in tp.paths.values() for u, v in pairwise(path)}
        nx.draw_networkx_edges(
            network.graph,
            pos,
            edgelist=sorted(edges),
            ax=ax,
            width=2.2,
            edge_color=[colour],
            arrows=True,
            arrowsize=10,
            connectionstyle=f"arc3,rad={0.04 * (i + 1)}",
        )
        ax.plot(
            [],
            [],
            color=colour,
            linewidth=2.2,
            label=f"{tp.job}/{tp.task}: {tp.rate_gbps:.3g} Gbps",
        )
        for point in tp.aggregation:
            x, y = pos[point.switch]
            ax.scatter([x], [y], s=900, facecolors="none", edgecolors=[colour], linewidths=2)
            ax.annotate(
                f"p{point.pipeline}x{point.fan_in}",
                (x, y),
                xytext=(12, 10),
                textcoords="offset points",
                fontsize=7,
                color=colour,
            )
    ax.legend(loc="upper left", fontsize=7)
