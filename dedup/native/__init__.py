"""The compiled kernels (_kernel.c: fingerprints and Bloom bits; _lookup.c: the confirm
pass and the index lookups) and their loader, compiled.py (None where they did not build)."""
