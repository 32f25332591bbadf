"""URL resolution: ada-url vs yarl vs urllib.parse.urljoin vs w3lib, and our cache.

Why: canonicalization, not the Bloom filter, is the per-link cost of the URL-seen
test, so `dedup.url.canonical` uses whichever WHATWG parser is measured fastest here,
and caches per resolution context so repeated navigation costs a dict lookup.

Links are generated deterministically (seeded) the way pages contain them: a
page URL (in a directory of a site) and links of every shape — site-absolute
`/x`, path-relative `x` and `../x`, absolute `https://other/x`, scheme-relative
`//cdn/x`, `?page=2`, `#top`, `mailto:`/`javascript:`, percent-escapes, non-ASCII
paths, tracking parameters and surrounding whitespace.

1. Parsers: each resolves the same links against their page URL.
   - ada:     `ada_url.join_url(page, link)`
   - yarl:    `page_url.join(yarl.URL(link))`, page parsed once per page (favours yarl)
   - urljoin: `urllib.parse.urljoin(page, link)`
   - w3lib:   `w3lib.url.canonicalize_url(urljoin(page, link))` (w3lib needs an
     absolute URL; `canonicalize_url` alone is also shown, on pre-joined links)
   - ours:    `dedup.url.canonical.canonicalize(link, page)` (ada + our rules, no cache)
   Each row also counts, on the WHATWG test data's 247 http(s) cases, how often the
   parser's href equals the standard's (ours: the canonical key of both sides).
2. `Canonicalizer.resolve_many` on pages of 50 links, 80% of them navigation
   repeated on every page of a site: first pass (cold cache, misses included)
   and second pass (every link a hit).
3. The hot path before/after, on a crawl-like stream (`crawl_stream`): 75 raw
   hrefs a page on Zipf-popular hosts (50k), navigation repeated on every page of
   a host (root- and folder-relative, dot segments, mixed-case absolute,
   scheme-relative, `#frag`, `?q` with tracking parameters, `javascript:`),
   articles linked in six written forms, recent and long-ago, ~78% repeated keys.
   (`bench/stream.py`'s generator has 10 hosts and 50 links a page, too uniform
   for a cache hit rate to mean anything.) Timed, interleaved and repeated on the
   same pages, each run from an empty cache: ada's raw join (the floor), the
   Canonicalizer of git revision `--against` (loaded from git) and of the work
   tree, as `resolve_many` alone and as the seen-test's stage (distinct keys of
   the page and their fingerprints: `resolve_many` + dedupe + `fingerprint_many`),
   plus hit rates per cache size.
4. The scale benchmark's stream (`bench/crawlstream.py`, what `scale.py` feeds
   `UrlSeen`): `resolve_many` with the compiled fast path (`dedup/native/_canon.c`),
   on the Python path alone (as with `BLOOMCRAWL_NO_KERNEL=1`), at `--against`, and
   ada's `join_url` on the same pages, rounds interleaved, CPU time of the process
   (`time.process_time`: a shared machine's other load does not count); the ratio
   to ada is taken within each round.

    .venv/bin/python bench/canon_parsers.py [--links 100000] [--repeat 3] [--against REV]
        [--only parsers,cache,hot,scale] [--scale-pages 4000]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import random
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import ada_url
import yarl
from w3lib.url import canonicalize_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawlstream import CrawlStream

from dedup.native import compiled
from dedup.url.canonical import Canonicalizer, UrlRejected, canonicalize
from dedup.url.fingerprint import fingerprint_many
from dedup.url.urlform import join

WPT = Path(__file__).resolve().parent.parent / "tests/data/urltestdata.json"
WORDS = ("news", "sport", "world", "tech", "science", "health", "business", "culture",
         "opinion", "video", "live", "crawler", "bloom", "filter", "shard", "ledger",
         "frontier", "politeness", "robots", "asyncio")
LINKS_PER_PAGE = 50


def _site_page(rng: random.Random, site: int) -> str:
    dirs = "/".join(rng.choice(WORDS) for _ in range(rng.randrange(0, 4)))
    name = f"{rng.choice(WORDS)}-{rng.randrange(10**5)}.html"
    query = f"?ref={rng.randrange(100)}" if rng.random() < 0.2 else ""
    return f"https://www{site}.example.com/{dirs + '/' if dirs else ''}{name}{query}"


def _link(rng: random.Random) -> str:
    w = rng.choice
    k = rng.random()
    if k < 0.35:
        return f"/{w(WORDS)}/{w(WORDS)}-{rng.randrange(10**6)}.html"
    if k < 0.50:
        return f"https://other{rng.randrange(200)}.example.org/{w(WORDS)}/{rng.randrange(10**6)}"
    if k < 0.60:
        return f"../{w(WORDS)}/page{rng.randrange(10**4)}.html?id={rng.randrange(10**6)}"
    if k < 0.67:
        return f"{w(WORDS)}-{rng.randrange(10**5)}.html"
    if k < 0.72:
        return f"/{w(WORDS)}?utm_source=feed&utm_medium=rss&id={rng.randrange(10**5)}&b=1&a=2"
    if k < 0.76:
        return f"#section-{rng.randrange(20)}"
    if k < 0.79:
        return f"?page={rng.randrange(50)}"
    if k < 0.82:
        return f"//cdn{rng.randrange(5)}.example.net/img/{rng.randrange(10**6)}.png"
    if k < 0.85:
        return rng.choice(("mailto:desk@example.com", "javascript:void(0)", "tel:+15551234"))
    if k < 0.88:
        return f"/wiki/Caf%c3%a9_{rng.randrange(10**4)}?q=%7euser"
    if k < 0.91:
        return f"/städte/{w(WORDS)}/{rng.randrange(10**4)}"
    if k < 0.94:
        return f"  /{w(WORDS)}/{rng.randrange(10**4)}\n"
    if k < 0.97:
        return f"HTTPS://WWW{rng.randrange(20)}.Example.COM:443/{w(WORDS)}/./a/../{rng.randrange(10**4)}"
    return f"./{w(WORDS)}/{rng.randrange(10**4)}#frag"


def make_pairs(n: int, seed: int = 1) -> list[tuple[str, str]]:
    """``n`` (page URL, link) pairs, ``LINKS_PER_PAGE`` links per page."""
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < n:
        page = _site_page(rng, rng.randrange(100))
        pairs.extend((page, _link(rng)) for _ in range(LINKS_PER_PAGE))
    return pairs[:n]


# -- the crawl-like stream ---------------------------------------------------------------

Page = tuple[str, list[str]]
SECTIONS = 6
STREAM_LINKS = 75
N_FRESH = 8  # new articles a page
# how a page links an article of its section, by cumulative share
ARTICLE_FORMS = ((0.45, "story-{a}.html"),
                 (0.6, "/s{s}/story-{a}.html?utm_campaign=home&gclid=Zx"),
                 (0.7, "../s{s}/./story-{a}.html#comments"),
                 (0.8, "https://WWW.Site{h}.Example/s{s}/story-{a}.html?utm_source=tw"),
                 (0.9, "//www.site{h}.example/s{s}/story-{a}.html"),
                 (0.95, "story-{a}.html#c"),
                 (1.0, "story-{a}.html?b=2&a={a3}"))


def _host_nav(h: int) -> list[str]:
    """The links every page of host ``h`` carries, as its authors wrote them."""
    host, mixed = f"www.site{h}.example", f"WWW.Site{h}.EXAMPLE"
    return ["/", "/", *(f"/s{s}/" for s in range(SECTIONS)), "/about/", "../about.html",
            "./", "index.html?page=1", "../../privacy.html",
            *(f"/a/./b/../tag/{t}/" for t in range(6)), f"HTTPS://{mixed}/feed.xml",
            f"https://{host}:443/contact/", f"//cdn.site{h}.example/app.js",
            f"//{mixed}/account/", "#top", "#", "#main", "?sort=asc&utm_source=nav", "",
            "javascript:void(0)", f"mailto:desk@site{h}.example",
            "/search?q=&utm_source=nav&gclid=x1", "/login?next=%2f", " /help/ \n",
            "https://social.example/share?fbclid=ab&u=1",
            "https://www.iana.org/help/example-domains"]


def crawl_stream(n_pages: int, hosts: int = 50_000, seed: int = 11) -> list[Page]:
    """``n_pages`` (page URL, 75 raw hrefs) of a crawl over Zipf(1.1)-popular hosts."""
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1.0 / r ** 1.1 for r in range(1, hosts + 1)))
    total = cum[-1]

    def zipf_host() -> int:
        return bisect.bisect(cum, rng.random() * total)
    known: dict[tuple[int, int], list[int]] = {}
    navs: dict[int, list[str]] = {}
    next_id = 0
    pages = []
    for _ in range(n_pages):
        h, s = zipf_host(), rng.randrange(SECTIONS)
        nav = navs.get(h)
        if nav is None:
            nav = navs[h] = _host_nav(h)
        old = known.setdefault((h, s), [])
        folder = f"https://www.site{h}.example/s{s}/"
        page = f"{folder}story-{rng.choice(old)}.html" if old else folder
        if rng.random() < 0.1:
            page = page.replace("www.", "WWW.") + "?utm_medium=email#x"
        links = list(nav)
        others = [f"https://www.site{zipf_host()}.example/" for _ in range(2)]
        links += others
        n_rel = STREAM_LINKS - len(links) - N_FRESH - 3
        if old:  # recent articles and long-ago ones
            rel = [rng.choice(old[-200:]) if rng.random() < 0.6 else rng.choice(old)
                   for _ in range(n_rel)]
        else:  # a host's or section's first page: its footer repeats the navigation
            rel = []
            links += [rng.choice(nav) for _ in range(n_rel)]
        fresh = list(range(next_id, next_id + N_FRESH))
        next_id += N_FRESH
        old.extend(fresh)
        arts = rel + fresh
        arts += [rng.choice(arts) for _ in range(3)]  # teaser image + headline: same link twice
        for a in arts:
            k = rng.random()
            form = next(form for limit, form in ARTICLE_FORMS if k < limit)
            links.append(form.format(a=a, s=s, h=h, a3=a % 3))
        rng.shuffle(links)
        pages.append((page, links))
    return pages


def _ada(pairs: list[tuple[str, str]]) -> int:
    join = ada_url.join_url
    errors = 0
    for page, link in pairs:
        try:
            join(page, link)
        except ValueError:
            errors += 1
    return errors


def _yarl(pairs: list[tuple[str, str]]) -> int:
    url = yarl.URL
    last, base = None, None
    errors = 0
    for page, link in pairs:
        if page is not last:
            last, base = page, url(page)
        try:
            str(base.join(url(link)))
        except ValueError:
            errors += 1
    return errors


def _urljoin(pairs: list[tuple[str, str]]) -> int:
    for page, link in pairs:
        urljoin(page, link)
    return 0


def _w3lib(pairs: list[tuple[str, str]]) -> int:
    errors = 0
    for page, link in pairs:
        try:
            canonicalize_url(urljoin(page, link))
        except ValueError:
            errors += 1
    return errors


def _ours(pairs: list[tuple[str, str]]) -> int:
    errors = 0
    for page, link in pairs:
        try:
            canonicalize(link, page)
        except UrlRejected:
            errors += 1
    return errors


def _best_us(fn: Callable[[list], object], data: list, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - t0)
    return best / len(data) * 1e6


def conformance() -> dict[str, int]:
    """Cases (of the 247 http(s) successes) where each parser gives the standard's href."""
    cases = [c for c in json.loads(WPT.read_text(encoding="utf-8"))
             if isinstance(c, dict) and not c.get("failure")
             and c["protocol"] in ("http:", "https:")]

    def ada(i: str, b: str | None) -> str:
        return ada_url.join_url(b, i) if b else ada_url.parse_url(i, ("href",))["href"]

    def yarl_(i: str, b: str | None) -> str:
        return str(yarl.URL(b).join(yarl.URL(i))) if b else str(yarl.URL(i))

    def urljoin_(i: str, b: str | None) -> str:
        return urljoin(b, i) if b else urljoin(i, "")

    def w3lib_(i: str, b: str | None) -> str:
        return canonicalize_url(urljoin(b, i) if b else i, keep_fragments=True)

    agree = {}
    for name, fn in (("ada", ada), ("yarl", yarl_), ("urljoin", urljoin_), ("w3lib", w3lib_),
                     ("ours", canonicalize)):
        # ours drops the fragment and sorts the query: compare keys of both sides
        want = (lambda c: canonicalize(c["href"])) if name == "ours" else (lambda c: c["href"])
        n = 0
        for c in cases:
            with contextlib.suppress(Exception):  # a parser error is a disagreement
                n += fn(c["input"], c["base"]) == want(c)
        agree[name] = n
    return agree | {"total": len(cases)}


def navigation_pages(n_pages: int, seed: int = 2) -> list[tuple[str, list[str]]]:
    """Pages of 50 links: 40 navigation links shared by every page of the site
    (in 1 of 3 directories), 10 links unique to the page."""
    rng = random.Random(seed)
    sites = []
    for s in range(20):
        dirs = [f"/{d}/" for d in rng.sample(WORDS, 3)]
        nav = [_link(rng) for _ in range(40)]
        sites.append((s, dirs, nav))
    pages = []
    for p in range(n_pages):
        s, dirs, nav = sites[rng.randrange(len(sites))]
        page = f"https://www{s}.example.com{rng.choice(dirs)}story-{p}.html"
        links = nav + [_link(rng) for _ in range(LINKS_PER_PAGE - len(nav))]
        rng.shuffle(links)
        pages.append((page, links))
    return pages


def bench_cache(n_pages: int, repeat: int) -> None:
    pages = navigation_pages(n_pages)
    n_links = n_pages * LINKS_PER_PAGE
    canon = Canonicalizer()
    t0 = time.perf_counter()
    for page, links in pages:
        canon.resolve_many(links, page)
    cold = time.perf_counter() - t0
    info = canon.cache_info()
    warm = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for page, links in pages:
            canon.resolve_many(links, page)
        warm = min(warm, time.perf_counter() - t0)
    print(f"\nCanonicalizer.resolve_many, {n_pages} pages x {LINKS_PER_PAGE} links "
          f"(80% navigation repeats), cache_size {canon.cache_info()['maxsize']}:")
    print(f"  first pass  {cold / n_links * 1e6:6.2f} µs/link  {n_links / cold:>10,.0f} links/s"
          f"  (hits {info['hits']}, misses {info['misses']}, compiled path {info['compiled']})")
    print(f"  again       {warm / n_links * 1e6:6.2f} µs/link  {n_links / warm:>10,.0f} links/s"
          f"  (best of {repeat}; every link cached or compiled)")


# -- the hot path, before and after ---------------------------------------------------------


def load_canonical(rev: str) -> types.ModuleType:
    """``dedup/url/canonical.py`` as it was at git revision ``rev``, as a module of its own."""
    root = Path(__file__).resolve().parent.parent
    src = subprocess.run(["git", "show", f"{rev}:dedup/url/canonical.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"canonical_at_{rev}")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"{rev}:dedup/url/canonical.py", "exec"), mod.__dict__)
    return mod


def _floor_ada(pages: list[Page], _: Any) -> None:
    joiner = ada_url.join_url
    for page, links in pages:
        for link in links:
            with contextlib.suppress(ValueError):
                joiner(page, link)


def _floor_c(pages: list[Page], _: Any) -> None:
    for page, links in pages:
        base = page.encode()
        for link in links:
            join(link, base)


def _many(pages: list[Page], canon: Any) -> None:
    resolve_many = canon.resolve_many
    for page, links in pages:
        resolve_many(links, page)


def _stage(pages: list[Page], canon: Any) -> None:
    """A page's links for a seen-test: resolve, keep the first URL per key, hash the keys."""
    resolve_many = canon.resolve_many
    for page, links in pages:
        first: dict[str, str] = {}
        for pair in resolve_many(links, page):
            if pair is not None and pair[1] not in first:
                first[pair[1]] = pair[0]
        fingerprint_many(first)


def bench_hot_path(n_pages: int, repeat: int, against: str) -> None:
    pages = crawl_stream(n_pages)
    n_links = n_pages * STREAM_LINKS
    keys = {p[1] for page, links in pages for p in Canonicalizer(cache_size=0)
            .resolve_many(links, page) if p is not None}
    old = load_canonical(against).Canonicalizer
    rows: list[tuple[str, Callable[[list[Page], Any], None], Callable[[], Any]]] = [
        ("ada_url.join_url (raw join, no rules)", _floor_ada, lambda: None),
        ("ada C API, base encoded per page", _floor_c, lambda: None),
        (f"{against}: resolve_many, no cache", _many, lambda: old(cache_size=0)),
        ("now: resolve_many, no cache", _many, lambda: Canonicalizer(cache_size=0)),
        (f"{against}: resolve_many", _many, old),
        ("now: resolve_many", _many, Canonicalizer),
        (f"{against}: resolve_many + dedupe + fingerprint_many", _stage, old),
        ("now: resolve_many + dedupe + fingerprint_many", _stage, Canonicalizer),
    ]
    times: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    for _ in range(repeat):  # interleaved: every row once per round
        for label, fn, make in rows:
            canon = make()
            t0 = time.perf_counter()
            fn(pages, canon)
            times[label].append((time.perf_counter() - t0) / n_links * 1e6)
    print(f"\nHot path on the crawl-like stream: {n_pages:,} pages x {STREAM_LINKS} hrefs, "
          f"{len(keys):,} distinct keys ({1 - len(keys) / n_links:.1%} repeats); "
          f"{repeat} interleaved rounds, each run from an empty cache (100k entries)")
    print(f"{'':<52} {'median':>8} {'best':>7}  µs/link")
    for label, _, _ in rows:
        print(f"{label:<52} {statistics.median(times[label]):8.2f} {min(times[label]):7.2f}")
    print("\nCache hit rates on the same stream (one pass from empty; hits + misses "
          "= links):")
    for size in (25_000, 100_000, 400_000, 10**8):
        for label, canon, fn in ((against, old(cache_size=size), _many),
                                 ("now", Canonicalizer(cache_size=size), _many)):
            fn(pages, canon)
            info = canon.cache_info()
            print(f"  cache_size {size:>11,} {label:<8} hits {info['hits'] / n_links:6.1%}  "
                  f"misses {info['misses'] / n_links:6.1%}")


def _many_python(pages: list[Page], canon: Any) -> None:
    """``_many`` on the Python path alone: the compiled fast path switched off."""
    native = compiled.canon
    compiled.canon = None
    try:
        _many(pages, canon)
    finally:
        compiled.canon = native


def bench_scale_stream(n_pages: int, repeat: int, against: str) -> None:
    pages = CrawlStream(seed=1).chunk(n_pages)
    n_links = sum(len(links) for _, links in pages)
    old = load_canonical(against).Canonicalizer
    probe = Canonicalizer()
    _many(pages, probe)
    share = probe.cache_info()["compiled"] / n_links
    rows: list[tuple[str, Callable[[list[Page], Any], None], Callable[[], Any]]] = [
        ("ada_url.join_url (raw join, no rules)", _floor_ada, lambda: None),
        (f"{against}: resolve_many", _many, old),
        ("now: resolve_many, Python path", _many_python, Canonicalizer),
        ("now: resolve_many, compiled fast path", _many, Canonicalizer),
    ]
    if compiled.canon is None:
        rows.pop()
    times: dict[str, list[float]] = {label: [] for label, _, _ in rows}
    for _ in range(repeat):
        for label, fn, make in rows:
            canon = make()
            t0 = time.process_time()  # CPU time: the machine may be shared
            fn(pages, canon)
            times[label].append((time.process_time() - t0) / n_links * 1e6)
    ada = times[rows[0][0]]
    print(f"\nThe scale stream (crawlstream.CrawlStream(seed=1)): {n_pages:,} pages, "
          f"{n_links:,} hrefs, {share:.1%} of them resolved by the compiled path; "
          f"{repeat} interleaved rounds, each from an empty cache; CPU time")
    print(f"{'':<44} {'median':>8} {'best':>7}  µs/link  x ada (median of rounds)")
    for label, _, _ in rows:
        t = times[label]
        ratio = statistics.median(x / a for x, a in zip(t, ada, strict=True))
        print(f"{label:<44} {statistics.median(t):8.2f} {min(t):7.2f}  {ratio:>31.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--links", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pages", type=int, default=4000, help="pages for the cache benchmark")
    ap.add_argument("--stream-pages", type=int, default=None,
                    help="pages of the crawl-like stream (default: 5 x --pages)")
    ap.add_argument("--against", default="26b23aa",
                    help="git revision whose Canonicalizer is the 'before' (default: the "
                         "one before the per-page fast path)")
    ap.add_argument("--only", default="parsers,cache,hot,scale",
                    help="comma-separated sections to run (default: all)")
    ap.add_argument("--scale-pages", type=int, default=4000,
                    help="pages of the scale stream (75 hrefs each)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "parsers" in only:
        parsers(args.links, args.repeat)
    if "cache" in only:
        bench_cache(args.pages, args.repeat)
    if "hot" in only:
        bench_hot_path(args.stream_pages or 5 * args.pages, max(args.repeat, 2), args.against)
    if "scale" in only:
        bench_scale_stream(args.scale_pages, max(args.repeat, 2), args.against)


def parsers(n_links: int, repeat: int) -> None:
    pairs = make_pairs(n_links)
    absolute = [(urljoin(page, link), "") for page, link in pairs]
    agree = conformance()
    print(f"{n_links:,} links on {n_links // LINKS_PER_PAGE:,} pages, best of "
          f"{repeat}; WHATWG column: hrefs equal to the standard's, of {agree['total']}")
    print(f"{'parser':<34} {'µs/link':>8} {'WHATWG':>7}")
    rows = [("ada join_url", _ada, pairs, "ada"),
            ("yarl URL.join", _yarl, pairs, "yarl"),
            ("urllib.parse.urljoin", _urljoin, pairs, "urljoin"),
            ("w3lib canonicalize_url(urljoin)", _w3lib, pairs, "w3lib"),
            ("w3lib canonicalize_url (absolute)",
             lambda d: [canonicalize_url(u) for u, _ in d], absolute, None),
            ("dedup.url.canonical.canonicalize", _ours, pairs, "ours")]
    for label, fn, data, key in rows:
        us = _best_us(fn, data, repeat)
        print(f"{label:<34} {us:8.2f} {agree[key] if key else '':>7}")


if __name__ == "__main__":
    main()
