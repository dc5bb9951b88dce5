"""Throughput, memory and KV-cache benchmarks of DESIGN §9; run them with `python -m benchmarks`."""
