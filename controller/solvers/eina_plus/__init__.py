"""EINA+ (`eina-plus`, beyond the paper): EINA's routing trees, plus bypass.

The paper ends (Sec. V) on EINA's weak spot: every worker's flow is merged at its own
aggregator, so a rack whose aggregation capacity c_j is small caps every PS, while GRID,
which lets flows reach another aggregator or the PS unmerged, wins there (Fig. 2a, 5 PSs).
EINA+ drops that restriction: a worker's flow may leave its rack unmerged (bypass) and be
merged at any aggregator, or at none on its way to the PS; π[p] may merge some of the flows
reaching it and pass the others to the PS. Each PS keeps its own tree (as in EINA), so an
aggregator already splits its output across the PSs' trees; one task's merged flow cannot
split (the data plane has one aggregation point per task and pipeline).

On which terms it is scored: the evaluator's, on the topology as written. Bypass only pays
on an aggregator with `aggregates: addressed` (a flow crossing it unmerged is not charged);
on `aggregates: all` (EINA's semantics, what `ina topo gen edge` writes) every flow entering
the aggregator is charged to c_j anyway, and the model charges it too, so there EINA+ is EINA
with the baselines' plans as fallbacks. `ina bench eina` scores Fig. 2a both ways.

Parameters: EINA's `schemes.eina` ones (r_min, r_max, step, num_workers; no depth limit: the
merge trees only need to be acyclic), and `candidates`: the baselines also tried (default
grid,atp,rr, run with the plan's seed), whose plans EINA+ returns when they carry more.

Modules: `model` (CP-SAT), `routes` (plan building), `rerate` (one LP over the evaluator's
resources, for every candidate), `solver` (the scheme).
"""
