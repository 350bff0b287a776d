"""The schemes the papers compare with: simple routing and aggregation rules, no
optimisation model."""
