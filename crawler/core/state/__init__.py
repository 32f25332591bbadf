"""A crawl's state directory: created atomically after every check (statecreate),
reopened to resume (state), what the crawl keeps in its ledger, each value by name
(crawlstate), and the pages' counts kept there (pagecounts)."""
