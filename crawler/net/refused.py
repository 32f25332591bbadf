"""How a target refused as a private address is recorded and counted.

Why a module of its own: the words are written by the guard
(``crawler.net.netguard``, which needs the HTTP client) and read back from
pages.jsonl and the ledger by the page counts, ``bloomcrawl stats`` and the
reopening of refused URLs (``crawler.net.outcome.failure_cause``), which must
not load the HTTP client; both sides import them from here.
"""

from __future__ import annotations

__all__ = ["PRIVATE_REFUSED", "REFUSED", "refusal"]

REFUSED = "refused private address"  # how every refusal starts
PRIVATE_REFUSED = "private address refused"  # the cause it is counted under


def refusal(addr: object) -> str:
    """Why a target was not fetched, as pages.jsonl and the summary say it: with the
    flag that lets it through, since a crawl of one's own test site hits this first."""
    return f"{REFUSED} {addr} (needs --allow-private)"
