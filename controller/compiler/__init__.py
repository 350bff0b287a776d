"""A Plan turned into P4Runtime entities (flow ids, slots, multicast groups, fragment
segments), exactly the flows the evaluator scored."""
