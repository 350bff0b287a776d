"""What the controller reasons about: the topology file, the network graph built from it, and
the Plan every scheme returns (with the data plane's limits it must respect)."""
