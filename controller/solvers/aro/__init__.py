"""ARO: aggregator-aware routing optimization for Clos networks (Sec. III), on OR-Tools CP-SAT.

Modules, one job each: `unfold` (Sec. III-A graph), `qsr` (quantization, Eq. 10/11
resources), `model` (Sec. III-B constraints (4)-(10)), `search` (how the model is solved),
`accel` (SRO, APP), `routes` (Algorithm 1), `solver` (variants of Table II → Plan).

Formulation choice (measured on this 2-core machine, see BENCHMARKS.md for the full runs):

* One task (SJST): bisection over the rate levels at which feasibility can change
  (floor(cap/k), ~19 of them for N = 100), each probe a pure feasibility ILP where y·r ≤ cap
  is only a variable domain. SJST default (24×24 leaf-spine, 200 workers, 30 seeds): 4-5
  probes of 0.01-0.1 s, whole solve median 0.14 s, max 0.38 s, all proven optimal. ARO-RAW
  (N = 10 000, ~140 candidates) takes the same number of probes, median 0.21 s.
* Several tasks: the same bisection on a common threshold gives the max-min part; rates that
  differ per task use the variable-rate model with order literals on the flow count (the
  small-domain factor), hinted with the bisection routes. The notes' probe measured
  AddMultiplicationEquality never closing in 30 s versus 3-9 s for this kind of encoding; here
  the variable-rate model is solved to optimality in 3.5-5 s on the SRO stage-1 graph of the
  Fig. 11 λ = 3 instance (5 tasks).
* Refuting a rate on large instances is the slow part: on the λ = 3 full graph (72 spines,
  mostly INA-agnostic and interchangeable) the probe "all tasks at 50 Gbps" stayed open after
  32-48 s, also on a relaxation that merges interchangeable CS spines (`relax`). Ordering
  interchangeable spines by carried flow (symmetry cuts) made things slower (refine 3.5 → 21 s;
  the cuts contradict the hints) and was dropped. What works is the per-task relaxation
  (`Search.solo_refute`): one task alone cannot reach the next level (proved within its
  time share on λ = 3), which closes the max-min part.
* num_workers = 2 (the machine's cores; `--param num_workers=N`).
"""
