"""Benchmark: episodes under traffic regimes, per-episode metrics, at-fault classifier, score, tables."""
