"""ATRO: joint topology and routing over a reconfigurable pool ("Pushing the Performance
Boundary of In-Network AllReduce With Joint Topology and Routing Optimization").

Every candidate link of a pool file (`ina topo gen pool`) is a choice: ATRO picks which links
the optical patch panel builds (x), which way the reduction flows go on them (y), where they
merge (the aggregators, N_agg), maximising the common worker rate r (5). The plan carries the
chosen connections (`Plan.patch_panel`); `ina solve --topology-out FILE.yaml` writes them as an
ordinary topology (`controller.model.patch_panel`).

Several tasks (the paper's future work, Sec. V) share the pool: one network, per-task flows,
layers and aggregation, (14) summing every task's load; max-min of the tasks' rates first
(exact), then each task raised alone with the others kept, as ARO's MJMT (`solver`).

Modules, one job each: `instance` reads the pool into the paper's symbols, `model` builds
(2)-(21) at a fixed rate (a pure feasibility model, with the readings of what the printed model
leaves unsaid), `search` bisects over the rates where feasibility can change, `routes` turns a
solution into connections, worker paths and aggregation points, `relaxed` the aggregated
relaxation and the decomposition, `solver` is the scheme.

Parameters (`schemes.atro` in the topology, or `--param KEY=VALUE`):
  layers      L of (18)-(20), 1..|N_s|, default min(5, |N_s|) (the paper's setting)
  max_fan_in  flows one aggregator may merge, default 64 (the data plane's member bitmap,
              `dataplane.frame.MAX_FAN_IN`); 0 = unlimited, the paper's model
  symmetry    none (default) | switches | all: symmetry-breaking constraints (below)
  num_workers CP-SAT threads, default 2
  formulation aggregated (default) | classes | workers: how each probe is solved (`search`).
              aggregated: the relaxation with every common switch merged (`relaxed`) first
              bounds the rate (bisection on it alone) and refutes probes, then the exact model
              routes the merged model's network (the decomposition); classes: the exact model
              alone, interchangeable workers counted per switch; workers: the paper's model,
              one x per worker. The same optima; measured in BENCHMARKS.md (ATRO multi, large).

Formulation choices, measured on this 2-core machine under shared load (load average 5-6,
other sessions solving), default pool (20 switches × 24 ports, 4 INA, 90 workers, 100 Gbps):
* Rate search: r enters the model only through floor(b/r), so each probe fixes r and (14)
  becomes a flow-count bound; the bisection halves the rate *value* (the candidates b/k crowd
  at low rates): 50 Gbps feasible, then 100 Gbps refuted, 2 probes, `ina solve` 3.6-4.3 s
  end to end. With the position midpoint that ARO's search uses, the first probe was 4.3 Gbps
  and the solve took 2.6 s without symmetry breaking, but 120 s with it (below).
* The smallest valid M in (10) (`model` docstring) lets the LP relaxation count ports
  (an aggregator absorbs at most k·η − 2 flows), so the infeasible probes are refuted in
  presolve: 100 Gbps with 90 workers and 4 aggregators in 1.0 s.
* Symmetry breaking between interchangeable pool switches (ordered by ports used) and, in
  `all`, between interchangeable workers (ordered by their switch): each probe measured alone
  (30 s limit), none / switches / all:
    90 workers, 4 INA, 50 Gbps (feasible)     0.68 s / 1.17 s / no answer in 30 s
    90 workers, 4 INA, 100 Gbps (infeasible)  0.97 s / 1.70 s / 1.77 s
    80 workers, 4 INA, 100 Gbps (feasible)    0.49 s / 0.80 s / no answer in 30 s
    90 workers, 5 INA, 100 Gbps (feasible)    1.08 s / 1.83 s / no answer in 30 s
    90 workers, 2 INA, 50 Gbps (infeasible)   1.67 s / 3.13 s / 2.79 s
  The refutations come from the LP bound, which symmetry does not weaken or help, and the
  ordering constraints only make solutions harder to find; so the default is none.
  Whole solve of the default pool: none 4.3 s, switches 3.8 s, all: time-out at 60 s.
"""
