"""The sharded, growing Bloom filter: geometry, one layer's bits (arena), layers, shards
and their snapshot files."""
