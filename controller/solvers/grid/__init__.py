"""GRID's gradient routing (Fang et al., Sec. 4): problem (1), its LP relaxation, R-GRIA, and
an exact solver of (1). Two schemes: `grid` (R-GRIA, `rgria.py`) and `grid-opt` (`opt.py`).

Taken from the paper, per task (tasks are independent, as the paper says of PSs):

* Model (1) (`model.py`): each worker n picks one aggregation node, an INA switch s or the PS α
  (x_n^s); it sends r_n^s ≤ x_n^s·T to it; r_n^s ≤ y_s (a switch forwards one aggregated flow
  at rate y_s); Σ_n r_n^s ≤ C_s (processing capacity); Σ_n r_n^α + Σ_s y_s ≤ B_α (PS
  ingress); max λ ≤ Σ_s r_n^s. C_s is the switch's `aggregation_capacity_gbps`, or the sum of
  its incoming link capacities when the file leaves it open (a switch cannot aggregate faster
  than it receives). B_α is the capacity of the PS's incoming links.
* T, the maximum sending rate (Table 1): `max_rate_gbps` (`--param max_rate_gbps=G` or the
  topology's `schemes.grid.max_rate_gbps`), by default B_α as Sec. 4.2 says ("i.e., the
  ingress bandwidth of the PS"); the paper's Fig. 1 reasons with T = the worker link. T caps
  λ in (1), bounds r_n^s ≤ x_n^s·T in the LP (so it changes R-GRIA's draws too), and caps
  the plan's rates: workers never send faster than T. Below B_α, `grid` draws from the LP at
  B_α too, capped at T, and keeps the better plan (`details.drawn_from`; why in
  `rgria.run_variant`): a lower T never gives less than the plan at T = B_α capped at it.
* LP relaxation x ∈ [0, 1] (`lp.py`, OR-Tools GLOP); its λ̃ is `lp_value_gbps`, an upper bound
  for (1) (not for the network: the evaluator may find more).
* R-GRIA (Alg. 1): worker n goes to s with probability r̃_n^s / Σ_s r̃_n^s, drawn with the
  seed, so each worker has exactly one aggregation node.
* The data plane's fan-in limit L (`max_fan_in`, default 64; 0: none, the paper's model) is a
  row of (1), |N_s| ≤ L per switch ((1) knows a switch, not its pipelines; each point of it
  then merges at most L flows). `grid-opt` solves (1) with it, so its `optimal` and bound are
  within the limit. `grid` caps in the rounding: the LP has the row Σ_n x̃_n^s ≤ L (λ̃ stays
  an upper bound of (1) with the limit), and a worker drawn to a switch that already has L
  workers draws again among the other nodes by the same r̃_n^s (the PS always has room).
  What it keeps of GRID's analysis: Theorems 1-3 (one node per worker, rate ≤ T, ≤ its node's
  rate) hold as before; where no switch fills, the draws are Alg. 1's, number for number; the
  Chernoff bounds of Theorems 5-6 need independent draws, so they no longer cover the
  redrawn workers, whose load moves to their other nodes. The rates are the evaluator's
  either way.

Interpretations, where the paper leaves the real topology out (Sec. 4.1 assumes links are never
the bottleneck, yet its Fig. 1 is decided by a 3 Gbps link):

* `links`: the LP may carry one row per directed link for the flows of each candidate on a
  fixed shortest route (worker → s, s → PS, worker → PS; ECMP-drawn with the seed). When links
  are not binding this is exactly model (1); without the rows it is the pure model, which is
  how GRID's simulations and ARO evaluated GRID. Neither variant dominates (measured, GRID
  Fig. 11 (a), 40-worker fat-tree, 3 seeds: 20.6 Gbps without rows, 11.6 with; GRID Fig. 1:
  1.5 without, the paper's 3 only with), so `grid` runs
  R-GRIA on both, each from the seed afresh (exactly what `links=true` or `links=false`
  alone gives) and keeps the plan the evaluator scores best: never worse than either alone;
  `details.variant` says which won, `details.variants` both scores. `links=true|false` runs
  one variant. `grid-opt` reads the same switch (default true) for its model.
* `candidates`: "all" INA switches (the paper), or "shortest": only INA switches on a shortest
  worker→PS path, ARO's up-down adaptation (own leaf, INA spines, the PS's leaf). Either way
  only switches the worker reaches without crossing a host: a worker cabled straight to its
  PS has the PS alone.
* `draws` (default 16): R-GRIA is repeated with successive draws of the seeded generator and the
  draw the evaluator scores best is kept; `draws=1` is Alg. 1 verbatim.
* Routing (`routes.py`): R-GRIA's workers take a least-loaded shortest path to their node, each
  node's merged flow likewise to the PS. `details["merged_at"]` lists, per worker, the switches
  that merge its gradient (exactly one, or none when its node is the PS).

Why our numbers are our own, not the GRID authors' code's (their public routing code gives the
same LP value as ours on every instance we tried): it rounds by x̃_n^s instead of Alg. 1's
r̃_n^s, and it reports the rates R-GRIA claims (Alg. 1 lines 8-12: λ = λ̃ by Theorem 7, even
where the draw overloads a switch or the PS) without re-scoring them, where ours are what the
evaluator finds the drawn routes carry.
"""

from controller.solvers.grid.model import PS
from controller.solvers.grid.routes import least_loaded_routes

__all__ = ["PS", "least_loaded_routes"]
