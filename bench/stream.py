"""UrlSeen.filter_new end to end on a realistic link stream, and where the time goes.

Why: the URL-seen test runs on every link of every page, so its links/s bounds a
worker's crawl rate. Most links a crawler finds are repeats (navigation), and
canonicalization, not the Bloom filter, is the per-link cost that dominates, so
the stream must look like real pages for the number to mean anything.

The stream (deterministic, seeded): pages of 50 links on 10 hosts, each page in
one of 8 section folders. 38 links are the host's navigation, the same text on
every page: root-relative (``/section/3/``, ``/tag/7/``), folder-relative
(``../about.html``, ``./``), absolute and scheme-relative, page-relative (``#top``,
``?sort=asc&utm_source=nav``, which is a new URL on every page) and non-http
(``javascript:``, ``mailto:``). 12 are article links relative to the page's
folder (``article-123.html?ref=p4#c``): 9 new, 3 to articles linked before. The
page itself is an article linked earlier, so about 80% of the links are
repeats (the exact share is measured and printed).

Measured on the same stream, each from a fresh state directory in /tmp:

* UrlSeen.filter_new, autocommit=True (one SQLite commit per page);
* UrlSeen.filter_new, autocommit=False + commit() every 100 pages (group commit,
  the crawler's mode; the final commit is timed too);
* the same again with the calls filter_new makes timed one by one (canonicalize,
  the confirm pass that fingerprints every link, the Bloom probe and add, the
  ledger's index lookup, append and commit): the breakdown;
* peers: w3lib ``canonicalize_url(urljoin(page, link))`` + a Python set (Scrapy's
  dupefilter approach: exact, in memory, unbounded, not durable), and our
  Canonicalizer + a set (to separate canonicalization from the rest).

UrlSeen uses its default geometry (10M capacity, 1%, 64 shards) and caches
(100k canonicalizations, 500k confirmed fingerprints).

    .venv/bin/python bench/stream.py [--pages 4000] [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from w3lib.url import canonicalize_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import emit

from dedup import Canonicalizer, UrlSeen

HOSTS = 10
SECTIONS = 8
LINKS_PER_PAGE = 50
NEW_ARTICLES = 9
RELATED = 3
COMMIT_EVERY = 100

Page = tuple[str, list[str]]


def navigation(h: int) -> list[str]:
    """The 38 links every page of host ``h`` carries."""
    nav = ["/", *(f"/section/{s}/" for s in range(SECTIONS)), "/about/", "/contact/",
           "/newsletter/", *(f"/tag/{t}/" for t in range(10)), "/login?next=%2F",
           "/search?q=&utm_source=nav",
           "../about.html", "../index.html", "./", "index.html?page=1", "../../privacy.html",
           f"https://www.site{h}.example/feed.xml", f"https://social.example/site{h}",
           f"//www.site{h}.example/account/", "https://www.iana.org/help/example-domains",
           "#top", "?sort=asc&utm_source=nav", "#", "javascript:void(0)",
           f"mailto:desk@site{h}.example"]
    assert len(nav) == LINKS_PER_PAGE - NEW_ARTICLES - RELATED
    return nav


def article(aid: int) -> str:
    return f"article-{aid}.html?ref=p{aid % 7}#c"


def make_stream(n_pages: int, seed: int = 7) -> list[Page]:
    rng = random.Random(seed)
    navs = [navigation(h) for h in range(HOSTS)]
    known: list[list[list[int]]] = [[[] for _ in range(SECTIONS)] for _ in range(HOSTS)]
    next_id = 0
    pages = []
    for _ in range(n_pages):
        h, s = rng.randrange(HOSTS), rng.randrange(SECTIONS)
        folder = f"https://www.site{h}.example/section/{s}/"
        old = known[h][s]
        # the page is an article linked earlier (a section front at first)
        page = folder + article(rng.choice(old[-500:])).removesuffix("#c") if old else folder
        related = [article(a) for a in rng.sample(old, min(RELATED, len(old)))]
        fresh = list(range(next_id, next_id + LINKS_PER_PAGE - len(navs[h]) - len(related)))
        next_id += len(fresh)
        old.extend(fresh)
        links = navs[h] + related + [article(a) for a in fresh]
        rng.shuffle(links)
        pages.append((page, links))
    return pages


# -- the runs ---------------------------------------------------------------------------


def run_seen(pages: list[Page], state: Path, *, group_commit: bool,
             before: Callable[[UrlSeen], None] | None = None) -> tuple[float, int, UrlSeen]:
    seen = UrlSeen(state, autocommit=not group_commit)
    if before:
        before(seen)
    new = 0
    t0 = time.perf_counter()
    for i, (page, links) in enumerate(pages, 1):
        new += len(seen.filter_new(links, page))
        if group_commit and i % COMMIT_EVERY == 0:
            seen.commit()
    if group_commit:
        seen.commit()
    return time.perf_counter() - t0, new, seen


def run_w3lib_set(pages: list[Page]) -> tuple[float, int]:
    seen: set[str] = set()
    new = 0
    t0 = time.perf_counter()
    for page, links in pages:
        for link in links:
            url = urljoin(page, link)
            if not url.startswith(("http://", "https://")):
                continue
            url = canonicalize_url(url)
            if url not in seen:
                seen.add(url)
                new += 1
    return time.perf_counter() - t0, new


def run_canon_set(pages: list[Page]) -> tuple[float, int]:
    canon = Canonicalizer()
    seen: set[str] = set()
    new = 0
    t0 = time.perf_counter()
    for page, links in pages:
        for r in canon.resolve_many(links, page):
            if r is not None and r[1] not in seen:
                seen.add(r[1])
                new += 1
    return time.perf_counter() - t0, new


class Stopwatch:
    """Total time and call count per named call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
        return timed


def instrument(sw: Stopwatch) -> Callable[[UrlSeen], None]:
    """Time the steps the seen-test core calls back for (UrlSeen hands it callables
    that look these up at each call): the rest is the core's own pass."""
    def before(seen: UrlSeen) -> None:
        b, led = seen.bloom, seen.ledger
        b.maybe_fingerprints = sw.wrap(  # type: ignore[method-assign]
            "Bloom probe (maybe_fingerprints, where no view)", b.maybe_fingerprints)
        b.add_hashes = sw.wrap("Bloom add_hashes", b.add_hashes)  # type: ignore[method-assign]
        led.held_among = sw.wrap("ledger index lookup (held_among)",  # type: ignore[method-assign]
                                 led.held_among)
        led.append = sw.wrap("ledger append", led.append)  # type: ignore[method-assign]
        led.commit = sw.wrap(f"ledger commit (every {COMMIT_EVERY} pages)", led.commit)  # type: ignore[method-assign]
    return before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--quick", action="store_true", help="400 pages, one run: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.pages, args.repeat = 400, 1
    pages = make_stream(args.pages)
    n_links = sum(len(links) for _, links in pages)
    n, per_page = len(pages), 1e6 / len(pages)

    rows = []
    breakdown: list[list[Any]] = []
    notes = []
    with tempfile.TemporaryDirectory(prefix="bloomcrawl-stream-") as tmp:
        for group_commit in (False, True):
            t = float("inf")
            for r in range(args.repeat):  # each from an empty state directory
                dt, new, seen = run_seen(pages, Path(tmp) / f"{group_commit}-{r}",
                                         group_commit=group_commit)
                t = min(t, dt)
                stats, cache = seen.stats(), seen.canonicalizer.cache_info()
                seen.close()
            rows.append([f"UrlSeen.filter_new, autocommit={not group_commit}",
                         f"commit() every {COMMIT_EVERY} pages" if group_commit else
                         "1 commit per page", n_links / t, t * per_page, new,
                         "durable, bounded memory"])
        notes.append(
            f"{n:,} pages, {n_links:,} links; {new:,} new = {new / n_links:.1%} "
            f"(so {1 - new / n_links:.1%} repeats or rejected). Group-commit run: "
            f"{stats['rejected']:,} rejected, {stats['confirm_cache_hits']:,} answered by the "
            "confirm cache (keys confirmed or admitted lately), then "
            f"{stats['bloom_definitely_new']:,} definitely new by Bloom and "
            f"{stats['bloom_maybe']:,} maybe-seen, {stats['ledger_queries']:,} ledger "
            f"queries, {stats['false_positives']} Bloom false positives; "
            f"canonicalization cache {cache['hits']:,} hits / {cache['misses']:,} misses.")

        sw = Stopwatch()
        total, _, seen = run_seen(pages, Path(tmp) / "c", group_commit=True,
                                  before=instrument(sw))
        seen.close()
    for name, s in sw.seconds.items():
        breakdown.append([name, sw.calls[name], s / n * 1e6, s / n_links * 1e9, s / total])
    other = total - sum(sw.seconds.values())
    breakdown.append(["rest of filter_new (the core's pass: resolve, fingerprint, cache)", None,
                      other / n * 1e6, other / n_links * 1e9, other / total])
    breakdown.append(["total (instrumented run)", None, total / n * 1e6, total / n_links * 1e9,
                      1.0])

    t, new = run_w3lib_set(pages)
    rows.append(["w3lib canonicalize_url(urljoin) + set", "peer: Scrapy dupefilter",
                 n_links / t, t * per_page, new, "in memory, unbounded, not durable"])
    t, new = min(run_canon_set(pages) for _ in range(args.repeat))
    rows.append(["dedup Canonicalizer.resolve_many + set", "canonicalization alone",
                 n_links / t, t * per_page, new, "in memory, unbounded, not durable"])
    notes.append(f"Best of {args.repeat} runs (w3lib peer and the breakdown: one run).")
    notes.append("w3lib's canonicalize_url keeps utm_* parameters (ours drops them) and parses "
                 "with urllib, not WHATWG, so its 'new' count can differ slightly.")
    emit([
        {"title": f"URL-seen test on a realistic stream ({n:,} pages x {LINKS_PER_PAGE} links)",
         "columns": ["method", "mode", "links/s", "µs/page", "new links", "memory"],
         "rows": rows, "notes": notes},
        {"title": "Where filter_new's time goes (group-commit mode, calls timed one by one)",
         "columns": ["stage", "calls", "µs/page", "ns/link", "share"],
         "rows": breakdown,
         "notes": ["share = fraction of the instrumented run; the timers add ~1 µs per call."]},
    ], pages=n, links=n_links)


if __name__ == "__main__":
    main()
