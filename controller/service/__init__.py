"""The running controller: discovery, programming, re-planning and failover."""
