"""The compiled kernels (_kernel.c: fingerprints and Bloom bits; _lookup.c: the confirm
pass and the index lookups; _canon.c: the canonicalizer's common case;
_rowcrc.c: the journal's row checksum pass) and their loader,
compiled.py (None where they did not build)."""
