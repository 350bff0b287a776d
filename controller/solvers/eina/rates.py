"""The best real (continuous) rates for fixed trees: the LP left once x is chosen.

With the trees fixed, (10)-(12) and the workers' links are linear in r, so GLOP (OR-Tools' LP
solver) gives the rates that maximise (13) exactly up to floating point; the quantized rates
CP-SAT returned are a feasible start, so the LP is never worse than them.
"""

from __future__ import annotations

from ortools.linear_solver import pywraplp

from controller.solvers.eina.instance import Instance

Parents = list[dict[str, str]]  # per PS: aggregator → the aggregator it sends to


def flow_counts(inst: Instance, parents: Parents) -> tuple[list[dict], list[dict], list[dict]]:
    """Per PS: flows entering each aggregator (local workers + children), sent, received."""
    entering, sent, received = [], [], []
    for p, tree in enumerate(parents):
        into = dict.fromkeys(inst.aggregators, 0)
        for parent in tree.values():
            into[parent] += 1
        received.append(into)
        entering.append({j: into[j] + inst.local[p][j] for j in inst.aggregators})
        sent.append({i: int(i in tree) for i in inst.aggregators})
    return entering, sent, received


def best_rates(inst: Instance, parents: Parents) -> list[float]:
    lp = pywraplp.Solver.CreateSolver("GLOP")
    P = range(len(inst.ps))
    r = [lp.NumVar(float(inst.r_low), float(inst.r_high[p]), f"r{p}") for p in P]
    entering, sent, received = flow_counts(inst, parents)
    for j in inst.aggregators:
        lp.Add(sum(entering[p][j] * r[p] for p in P) <= float(inst.c[j]))  # (10)
        lp.Add(sum(sent[p][j] * r[p] for p in P) <= float(inst.b_in[j]))  # (11)
        lp.Add(sum(received[p][j] * r[p] for p in P) <= float(inst.b_out[j]))  # (12)
    # one row per distinct (tasks, capacity): 7,500 workers share a handful
    for tasks, cap in {(tuple(inst.tasks_of[w]), cap) for w, cap in inst.host_cap.items()}:
        lp.Add(sum(r[p] for p in tasks) <= float(cap))
    lp.Maximize(sum(r))
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("GLOP found no rates for trees CP-SAT proved feasible")
    return [v.solution_value() for v in r]
