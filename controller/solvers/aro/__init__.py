"""ARO: aggregator-aware routing optimization for Clos networks (Sec. III), on OR-Tools CP-SAT.

Modules, one job each: `unfold` (Sec. III-A graph), `qsr` (quantization, exact rates, Eq. 10/11
resources), `model` (Sec. III-B constraints (4)-(10)), `search` (how the model is solved),
`accel` (SRO, APP), `routes` (Algorithm 1), `solver` (variants of Table II → Plan).

Formulation choice (measured on this 2-core machine, see BENCHMARKS.md for the full runs):

* One task (SJST), or tasks of equal weight: bisection over the exact rates at which
  feasibility can change (capacity / flow count, 150-175 of them on the SJST default), each
  probe a pure feasibility ILP where y·r ≤ cap is only a variable domain. The midpoint is taken
  in rate value, not in list position (the exact rates crowd at low values, where probes are
  feasible and slow), so a solve takes 4-5 probes, as the bisection over the paper's ~19
  quantized levels (floor(N·cap/b̄/k), N = 100) did; the result is the real optimum, not the
  quantized one, and one fat link among thin ones costs nothing. SJST default
  (24×24 leaf-spine, 200 workers, seeds 0-9, `ina bench aro --seeds 10 --variants
  aro,aro-acc,aro-raw,aro-qsr`, run back to back with the code before on a shared machine at
  load 5-6): aro median 0.35 s (max 0.61) against 0.63 s (1.49), all proven optimal at the
  same rates; aro-acc 0.50 s against 0.53 s, now `feasible` on the 4 seeds where its reduced
  model loses rate (25 against 33.3 Gbps; it claimed `optimal` before).
* Several tasks: first each task's own optimum alone on the network (the SJST bisection per
  task): the other tasks only take capacity, so these per-task caps bound every r[i] and
  hence Eq. (1)-(3), which is monotone in each rate. Tasks meet only on shared links, so the
  tasks' own routes usually fit together at the caps as they are, or after re-routing a task
  alone on the capacity the others leave; the result is then optimal with no joint search.
  Fig. 11 λ = 5 seed 1 (aro-acc): before, the joint probe "all tasks at 50 Gbps" and the
  variable-rate model ran out of the 60 s (gap 66.7 %); now the final stage proves the optimum
  from the caps in 2.5 s (28.5 s in all, most of it SRO stage 1); 5 of the 6 Fig. 11 aro-acc
  runs ended proven optimal against the reduced (SRO/APP) model's bound, the sixth with a model
  gap of 0.1 %, all within the limit; aro-acc's bound is the full problem's
  (`solver._full_bound`), so these are `feasible` where the reduction cost rate. Half of
  a stage's time goes to the tasks alone (`SOLO_SHARE`): with 0.7, λ = 5 seed 0 left too
  little for the joint probe that finds all tasks at 50 Gbps (22 s) and ended at gap 33 %.
* Otherwise (the caps cannot be joined) the bisection on a common threshold, bounded above by
  the caps, gives the max-min part, and the variable-rate model with order literals on the
  flow count (the small-domain factor), hinted with the bisection's routes, the rest. The
  notes' probe measured AddMultiplicationEquality never closing in 30 s versus 3-9 s for this
  encoding. Refuting a common rate on the full graph of a large instance is the slow part
  (λ = 3: "all tasks at 50 Gbps" open after 32-48 s, also on the relaxation that merges
  interchangeable CS spines, `relax`; symmetry cuts on interchangeable spines made it slower
  and were dropped), which is why the per-task caps come first.
* Grids: the variable-rate model (several tasks) and ARO-QSR quantize; `search` and `qsr` say
  how their bounds still hold for the real problem, and `solver` how SRO/APP bound it.
* num_workers = 2 (the machine's cores; `--param num_workers=N`).
"""
