"""The INA controller, laid out along its data path.

topology file -> `model` (schema, network graph, Plan) -> `solvers` (one package per scheme,
baselines apart) -> `evaluator` (the one judge of a Plan) -> `compiler` (Plan -> P4Runtime
entities) -> `southbound` (P4Runtime and OpenFlow drivers) -> switches. `service` is the
running controller, `emulation` the Mininet runner and fault injection, `tools` the benchmarks,
drawings and tables the command line (`cli`) offers.
"""
