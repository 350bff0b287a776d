"""Trees for given rates r_p: EINA's constraints (2)-(12) with x chosen greedily.

With the rates fixed, what each aggregator j must carry anyway is known: its local workers
(a_{p,j} r_p against c_j, (10)) and, on a worker rack, one flow per PS it does not root (11).
What is left of c_j and b_j^E is j's room for children: a child of p costs r_p of both ((10),
(12)). Per PS, the tree grows from π[p]: the pending worker racks, roomiest first, are hung
under the attached aggregator with the most room, whose depth is below d̂ (4); when the room
left cannot take every pending rack, an idle aggregator with room for two or more children
joins as a relay (it pays r_p of b^I, (11)). An aggregator merges at most L flows of a task
(the fan-in limit): its local workers and its children. Hanging roomy racks first keeps room ahead
of demand: if the rack with the most room fits nowhere, no order would have placed it.
"""

from __future__ import annotations

import heapq

from controller.solvers.eina.instance import Instance

_EPS = 1e-9


def trees(inst: Instance, rates: list[float]) -> list[dict[str, str]] | None:
    """A parent map per PS meeting every capacity at `rates`, or None if the greedy fails."""
    A, P = inst.aggregators, range(len(inst.ps))
    if any(
        r < float(inst.r_low) - _EPS or r > float(inst.r_high[p]) + _EPS
        for p, r in enumerate(rates)
    ):
        return None
    if any(
        sum(rates[p] for p in inst.tasks_of[w]) > float(cap) + _EPS
        for w, cap in inst.host_cap.items()
    ):
        return None
    cap = {j: float(inst.c[j]) - sum(inst.local[p][j] * rates[p] for p in P) for j in A}
    egress = {j: float(inst.b_out[j]) for j in A}
    ingress = {j: float(inst.b_in[j]) for j in A}
    roots = [inst.home[ps] for ps in inst.ps]
    for p in P:
        for j in A:
            if inst.local[p][j] and j != roots[p]:
                ingress[j] -= rates[p]  # (2): a worker rack sends once per PS
    if any(v < -_EPS for v in (*cap.values(), *ingress.values())):
        return None
    order = sorted(P, key=lambda p: -rates[p])
    parents: list[dict[str, str]] = [{} for _ in P]
    for p in order:
        tree = _grow(inst, p, rates[p], cap, egress, ingress)
        if tree is None:
            return None
        parents[p] = tree
    return parents


def _grow(
    inst: Instance, p: int, r: float, cap: dict, egress: dict, ingress: dict
) -> dict[str, str] | None:
    root = inst.home[inst.ps[p]]
    star = {i: root for i in inst.aggregators if i != root and inst.local[p][i]}
    if r <= _EPS and (not inst.fan_in or len(star) + inst.local[p][root] <= inst.fan_in):
        # rate 0 takes no room: the star, if d̂ lets racks sit below π[p]
        return star if inst.d_hat >= 1 or not star else None
    kids: dict[str, int] = dict.fromkeys(inst.aggregators, 0)

    def room(j: str) -> int:
        """Children j may still adopt: by capacity at rate r, and by the fan-in limit L."""
        free = len(inst.aggregators) if r <= _EPS else int((min(cap[j], egress[j]) + _EPS) // r)
        if inst.fan_in:
            free = min(free, inst.fan_in - inst.local[p][j] - kids[j])
        return max(0, free)

    d_hat = inst.d_hat
    pending = sorted(
        (i for i in inst.aggregators if i != root and inst.local[p][i]), key=room, reverse=True
    )
    relays = sorted(
        (
            i
            for i in inst.aggregators
            if i != root and not inst.local[p][i] and ingress[i] + _EPS >= r and room(i) >= 2
        ),
        key=room,
        reverse=True,
    )
    parent: dict[str, str] = {}
    depth = {root: 0}
    heap = [(-room(root), root)] if d_hat >= 1 else []
    free = room(root) if d_hat >= 1 else 0  # room of attached aggregators that may adopt
    nxt = 0
    while nxt < len(pending):
        while heap and -heap[0][0] != room(heap[0][1]):  # stale entry
            _, j = heapq.heappop(heap)
            if room(j):
                heapq.heappush(heap, (-room(j), j))
        if not heap:
            return None
        _, v = heap[0]
        if free < len(pending) - nxt and relays and room(relays[0]) >= 2 and depth[v] + 1 < d_hat:
            child = relays.pop(0)
            ingress[child] -= r
        else:
            child = pending[nxt]
            nxt += 1
        parent[child] = v
        kids[v] += 1
        depth[child] = depth[v] + 1
        cap[v] -= r
        egress[v] -= r
        free -= 1
        if room(v) == 0 or depth[v] >= d_hat:
            heapq.heappop(heap)
        if depth[child] < d_hat and room(child):
            heapq.heappush(heap, (-room(child), child))
            free += room(child)
    for relay in [i for i in parent if not inst.local[p][i]]:
        if relay not in parent.values():  # a relay nobody joined sends nothing ((8))
            del parent[relay]
            ingress[relay] += r
    return parent
