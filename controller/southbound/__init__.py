"""Drivers that make switches do what a compiled plan says (P4Runtime for INA switches,
OpenFlow 1.3 for plain ones)."""
