"""How a run's work becomes durable: the group commit (a group's links admitted,
its records written, then one ledger transaction) and checkpoints (shard
snapshots and counters, which only shorten the replay on reopen)."""
