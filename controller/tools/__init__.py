"""What the command line offers beside planning and running: benchmarks (JSON + PNG),
drawings and the tables it prints."""
