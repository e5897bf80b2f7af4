"""The pieces of ``benchmarks/congestion_emulated.py`` (the entry point, and what it runs)."""
