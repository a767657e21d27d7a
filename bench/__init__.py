"""Benchmarks that print a ratio against a baseline measured in the same run (see README.md)."""
