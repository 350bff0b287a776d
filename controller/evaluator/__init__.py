"""The one judge of a plan: rates re-scored from its paths alone, against every capacity and
the data plane's limits; benchmarks and tests trust it, never a solver's own number."""
