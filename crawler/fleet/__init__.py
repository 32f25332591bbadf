"""Many crawl workers as one crawl: host ownership, Redis Streams between workers,
the supervisor of ``bloomcrawl fleet`` and fleet resizing."""
