"""One crawl: the engine over the frontier and politeness, admission and group commit,
retries, checkpoints, signals, progress, the output files (pages.jsonl, WARC) and the
crawl's state directory."""
