"""One crawl, in layers (each imports only the ones below it):

- ``run``: the crawl loop (engine), when it is over (underway), signals, progress,
  and ``Crawler`` (crawl) with the page handlers it calls (page);
- ``durability``: how a run's work becomes durable: the group commit, checkpoints;
- ``schedule``: which URLs are fetched and when (admission, frontier, politeness,
  retries, sitemaps), over
- ``state``: the crawl's state directory, what the crawl keeps in its ledger
  (crawlstate) and the pages' counts;
- ``outputs``: the files a crawl leaves besides its state (pages.jsonl, items.jsonl, WARC).
"""
