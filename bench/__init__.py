"""Benchmarks of the grid training step (`make bench`); see bench/README.md."""
