"""EINA ("Maximizing the Throughput of Edge-Based In-Network Aggregation With Routing
Optimization"): routing trees over edge aggregators, CP-SAT stand-ins for its MIQCP (`eina`)
and IQCP (`eina-iqcp`).

Modules, one job each: `instance` reads the topology into the paper's symbols, `model` builds
constraints (1)-(13), `search` runs CP-SAT, `rates` re-rates the chosen trees with an LP,
`bound` turns the quantized bound into one valid for real rates, `routes` builds the Plan's
paths and aggregation points, `solver` is the two schemes.

Parameters: `ina schemes eina` (defined in `controller/solvers/catalog.py`); `schemes.eina`
in a topology serves every scheme of the family, `--param KEY=VALUE` one run.

How the printed constraints are read where the text is garbled or silent:
  (2)  "Σ_j x_{p,i,j} = 1 ∀ i ∈ A_W" holds for every worker aggregator except the root π[p]:
       the root hands its aggregate to the PS, not to another aggregator (it has depth 0, and
       sending would need depth −1 by (5)-(6)). A_W is per PS: aggregators with workers of
       p's task (EINA gives every PS all workers, so it is the paper's A_W).
  (8)  "Σ_k x_{p,j,k} ≤ M Σ_i x_{p,i,j}" with binary x and (7) is Σ_k x_{p,j,k} ≤ Σ_i x_{p,i,j}:
       a relay sends only if it received.
  (9)  printed "d_{p,i} ≥ Σ_j x_{p,i,j} ∀ i ∈ A_E" only bites at depth 0: the root sends
       nothing (for i ≠ π[p] it repeats (4) and (7)). The prose before (7)-(9) adds the rule
       no printed line states, and without which a relay could swallow traffic (a worker
       aggregator would satisfy (2) by sending into a dead end): a relay that receives must
       forward, x_{p,k,i} ≤ Σ_j x_{p,i,j}.
  (10) printed Σ_p Σ_{i≠j} (x_{p,i,j} + a_j) r_p ≤ c_j would count a_j once per other
       aggregator; read (Σ_{i≠j} x_{p,i,j} + a_j) · r_p summed over p: every flow entering j
       (children's and local workers') at r_p is merged there.
  (11) printed Σ_p r_p ≤ b_i^I ∀ i ∉ {π[p]} binds p twice and charges relays that send
       nothing; read Σ_p Σ_{j≠i} x_{p,i,j} r_p ≤ b_i^I ∀ i ∈ A: what i sends into the fabric.
  (12) printed "∀ i ∈ A" for a constraint on j; read Σ_p Σ_{i≠j} x_{p,i,j} r_p ≤ b_j^E ∀ j ∈ A:
       what j receives from the fabric.
  Beyond the paper, each worker's own link carries Σ_p r_p (one flow per PS) and the root's
  link to PS p carries r_p, which PS p also aggregates when it has an aggregation capacity
  (its host's, else its task's); the paper assumes none of these binds, the model keeps them
  all so a plan never exceeds a capacity the evaluator checks. Each task has its own PS.
  An aggregator with c_j = 0 merges nothing: it adopts no child even at r_p = 0, and one that
  (10) would make merge (it holds workers, or a PS) is refused before solving.
"""
