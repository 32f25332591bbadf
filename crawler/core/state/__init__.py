"""A crawl's state directory: created atomically after every check (statecreate),
reopened to resume (state), and the pages' counts kept in its ledger (pagecounts)."""
