"""Throughput, memory and KV-cache benchmarks with targets for each variant's cost; run them with `python -m benchmarks`."""
