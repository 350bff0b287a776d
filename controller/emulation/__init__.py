"""The network on one machine: Mininet hosts and switches, the closed loop's runner, and the
fault tools (impairments, delay lines, the loss simulator)."""
