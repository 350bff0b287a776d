"""`eina-fast` (beyond the paper, whose Sec. III-C leaves "an efficient heuristic for huge-scale
routing" as future work): EINA's trees built greedily for a target rate, the target found by
bisection, the rates then set by EINA's LP. Same problem and semantics as `eina` (every flow
entering an aggregator is merged there), same parameters (`schemes.eina`), no CP-SAT: 1,000
aggregators x 8 PSs in seconds. The bound is EINA's tree-free one (`eina.bound.rack_bound`),
so the gap printed is proven. Modules: `greedy` (trees for given rates), `solver` (scheme).
"""
