"""Same content, other URLs: what a crawl learns from the pages it fetched.

Synchronous and pure, like the rest of dedup: keys, content prints and classes
in, decisions out; the crawler keeps the results in its ledger (``dedup.store.crawl``).

- ``simhash``: a page's main-text fingerprint (SimHash over word shingles);
- ``nearindex``: the first page of a host within a few bits of a fingerprint;
- ``rules``: URL rewrite rules of the classic kinds and what a duplicate pair proposes;
- ``learner``: the per-host online learner (evidence, acceptance, checks, revocation);
- ``novelty``: trap budgets by the share of fetches that brought new content.
"""
