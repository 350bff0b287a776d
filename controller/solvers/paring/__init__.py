"""PARING ("PARING: Joint Task Placement and Routing for Distributed Training With In-Network
Aggregation"): place a training task (its PS and n workers) and route its gradients on a
degree-constrained Steiner tree of INA switches.

Modules, one job each: `logical` is Alg. 1 (G' of free servers and aggregation-capable
switches, hop-count costs), `degrees` Alg. 2 steps 1-2 (PS, the rate loop, d(v)) and line 23,
`steiner` Alg. 3 and Alg. 4 (spiders by minimum-cost flow), `routes` the Plan's paths and
aggregation points, `exact` problem (1) on CP-SAT, `alg2` Alg. 2 for one PS, `several`
Sec. IV-C.3, `solver` the schemes `paring` and
`paring-opt` (CP-SAT warm-started with PARING's tree; `--time-limit`, default 30 s;
`num_workers`, default 2; `bound` = the optimal rate, `details.volume_bound_gb`).

The topology declares the demand on the task (topologies/README.md, jobs): `placement: free`
(n = the number of listed workers, any free server may be used), `rate_cap_gbps` (R),
`ps_aggregation_capacity_gbps` (B_v of the server made PS). Switch B_v is the switch's
`aggregation_capacity_gbps`; none means unlimited (P4 switches, Sec. IV-C.5).

Several PSs (Sec. IV-C.3, `several`): a job of several `placement: free` tasks is one
training task whose model is sharded over as many PSs; `paring` places them greedily, shard by
shard on the B_v left (several.py); `paring-opt` returns the same plan with a proven bound on
the summed rate (several.rate_bounds) and, with two PSs, searches the joint optimum exactly
(joint.py: candidate rate pairs at the rate LP's vertices, one CP-SAT feasibility per pair).

The data plane's fan-in limit L (`max_fan_in`, default 64; 0: none, the paper's model): a
tree switch has at most L children (its local workers and the switches below it), in step 2's
slot count (degrees.slots), in Alg. 3 whatever its slack, in `paring-opt`'s model and in
joint.py's; so `paring-opt`'s `optimal` and `bound` are those of (1) with the limit. A child
switch merging on several pipelines sends one flow per pipeline; a point those would take over
L merges only L of them (routes.py). In fine mode the shares are chosen within the limit
(`controller.solvers.partial.best_effort`: raw remainders count as flows).

Parameters (`schemes.paring` or `--param`): `gradient_gb`, the gradient size b (default 1),
used only for the traffic volume and communication time reported (b scales O_2, it does not
change the tree); `as_printed` (default false) runs Alg. 3 without the slot guard (steiner.py
reading (b)); `fine` (default false) is Sec. V-C's fine mode: on PARING's tree, a switch whose
capacity binds merges a share of the fragments and forwards the rest raw
(`controller.solvers.partial`; deployed segment by segment, `controller.compiler.segments`;
topologies/examples/paring-fine.yaml). With several PSs each shard is made fine in turn on
what the shards before it left (several.py). `paring-opt` refuses `fine`: its model is coarse.
"""
