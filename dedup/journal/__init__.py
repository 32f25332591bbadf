"""The record of truth: an append-only SQLite journal of batches, its format, the
frontier's queue table, row export/import and the WAL check."""
