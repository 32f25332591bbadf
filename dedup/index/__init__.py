"""The exact seen-set as an LSM tree of 16-byte fingerprints: the in-RAM table (fptable,
fpbuffer without the kernel), sorted run files, their lookup and merging."""
