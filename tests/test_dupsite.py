"""The duplicate-URL test site (``tests/support/dupsite.py``, issue 39): deterministic,
its ground truth agrees with what its servers answer, and each pattern is there when
switched on (and absent when off, so no check here passes on a site without it)."""

from __future__ import annotations

import asyncio
import re
from collections import deque
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import pytest
from selectolax.lexbor import LexborHTMLParser

from crawler.net.links import extract_links
from dedup import Canonicalizer
from tests.support.dupsite import DEFAULT_HOSTS, PATTERNS, HostSpec, Site, build

# -- a naive crawler: exact URL dedup, every link of the page's own host ---------------------


class Walk:
    """What an exact-URL crawler (bloomcrawl today) fetches from ``site``, in process:
    the page bodies come from ``Site.respond``, links from the crawler's own extractor
    and canonicalizer. ``got[url] = (content id or None, body)``."""

    def __init__(self, site: Site, limit: int) -> None:
        canon = Canonicalizer()
        index = {o: h for h, o in enumerate(site.origins)}
        seen = set()
        queue: deque[str] = deque()
        for s in site.seeds:
            url, key = canon.resolve(s)
            seen.add(key)
            queue.append(url)
        self.got: dict[str, tuple[str | None, str]] = {}
        self.traps: set[str] = set()
        n = [0] * len(site.hosts)
        while queue and len(self.got) < limit:
            url = queue.popleft()
            parts = urlsplit(url)
            h = index[f"{parts.scheme}://{parts.netloc}"]
            target = parts.path + ("?" + parts.query if parts.query else "")
            status, _, body, served = site.respond(h, target, n[h])
            n[h] += 1
            assert status == 200, f"{url} was linked but answers {status}"
            self.got[url] = (served.content, body)
            if not served.content:
                self.traps.add(url)
            base, hrefs = extract_links(body.encode(), url)
            for pair in canon.resolve_many(hrefs, base):
                if pair is None:
                    continue
                link, key = pair
                if key not in seen and urlsplit(link).netloc == parts.netloc:
                    seen.add(key)
                    queue.append(link)
        self.ended = not queue

    def content(self) -> dict[str, str]:
        return {u: c for u, (c, _) in self.got.items() if c is not None}


def main_text(body: str) -> list[str]:
    article = LexborHTMLParser(body).css_first("article")
    return [p.text() for p in article.css("p")]


# -- determinism --------------------------------------------------------------------------------


def test_the_same_seed_builds_the_same_site_and_another_seed_another():
    a, b, c = build(3, pages=150), build(3, pages=150), build(4, pages=150)
    assert a.truth == b.truth and len(a.truth) >= 140
    for nid in sorted(a.truth)[::7]:
        h = int(nid[1:nid.index(":")])
        target = a.node(nid).target
        assert a.respond(h, target, 5) == b.respond(h, target, 5)
    assert a.truth != c.truth or any(
        a.respond(0, t, 0)[2] != c.respond(0, t, 0)[2] for t in ("/", "/about/"))


def test_noise_and_session_ids_change_with_every_response_not_the_content():
    site = build(1, [{"noise", "sid_query"}], pages=60)
    one, two = site.respond(0, "/", 0)[2], site.respond(0, "/", 1)[2]
    assert one != two
    assert main_text(one) == main_text(two)
    sids = {re.findall(r"sid=([0-9a-f]{8})", body)[0] for body in (one, two)}
    assert len(sids) == 2


def test_sizes_follow_pages_and_every_page_is_near_the_seeds():
    for pages in (300, 600):  # about 50 a host and more: each pattern has its minimum size
        site = build(2, pages=pages)
        assert 0.9 * pages <= len(site.truth) <= 1.15 * pages, len(site.truth)
        assert max(site.depth[c] for c in site.truth) <= 10  # far under max_depth 20
    one = build(2, [{"print_view"}], pages=100)
    assert len(one.hosts) == 1 and 90 <= len(one.truth) <= 110


def test_bad_host_specs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="unknown patterns"):
        HostSpec(frozenset({"sessions"}))
    with pytest.raises(ValueError, match="contradict"):
        HostSpec(frozenset({"case_alias", "case_distinct"}))
    with pytest.raises(ValueError, match="at least one host"):
        build(1, [])


# -- the ground truth against the pages ---------------------------------------------------------


def test_every_link_of_every_spelling_is_served_and_every_page_shows_its_content():
    """Every reachable page, at its canonical URL and at each alias the host links, with
    session ids and noise: each link resolves (as the crawler resolves it) to a page the
    site serves (content or a declared trap), and the page's main text is the text of the
    content id ``content_of`` names for its URL."""
    site = build(5, pages=130)
    canon = Canonicalizer()
    checked = 0
    for nid in site.depth:
        h = int(nid[1:nid.index(":")])
        host = site.hosts[h]
        node = host.nodes.get(nid) or host.resolve(
            "/calendar/" + nid.rsplit(":", 1)[1].replace("-", "/")).node
        spellings = [node.target] + [p + ("?" + urlencode(q) if q else "")
                                     for p, q in host.aliases(node)]
        for n, target in enumerate(spellings):
            url = site.origins[h] + target
            status, _, body, served = site.respond(h, target, n)
            assert status == 200 and served.node.id == nid, url
            assert site.content_of(url) == (nid if node.content else None)
            assert main_text(body) == host.text(node), url
            base, hrefs = extract_links(body.encode(), url)
            for pair in canon.resolve_many(hrefs, base):
                assert pair is not None
                assert site.resolve(pair[0]).status == 200, f"{url} links {pair[0]}: 404"
                checked += 1
    assert checked > 5000


async def test_served_over_http_an_exact_url_crawl_finds_the_truth_and_pays_for_it():
    """Real aiohttp servers: a crawl with exact URL dedup over the finite patterns ends by
    itself; the content the servers counted is the ground truth, every request the
    client made was counted once, and the duplicates cost it well over one fetch a page."""
    finite = set(PATTERNS) - {"sid_query", "sid_path", "jsessionid", "calendar", "rel_loop"}
    site = build(6, [finite - {"case_distinct"}, {"case_distinct", "slug_distinct",
                                                  "ignored_slug", "noise"}], pages=150)
    canon = Canonicalizer()
    async with site.serve() as running, aiohttp.ClientSession() as http:
        scope = {urlsplit(o).netloc for o in running.origins}
        seen: set[str] = set()
        queue: asyncio.Queue[str] = asyncio.Queue()
        for s in running.seeds:
            seen.add(canon.resolve(s)[1])
            queue.put_nowait(s)
        fetched = []

        async def worker() -> None:
            while True:
                url = await queue.get()
                try:
                    async with http.get(url, allow_redirects=False) as resp:
                        body = await resp.read()
                        assert resp.status == 200, url
                    fetched.append(url)
                    base, hrefs = extract_links(body, url)
                    for pair in canon.resolve_many(hrefs, base):
                        if pair and pair[1] not in seen and urlsplit(pair[0]).netloc in scope:
                            seen.add(pair[1])
                            queue.put_nowait(pair[0])
                finally:
                    queue.task_done()

        workers = [asyncio.create_task(worker()) for _ in range(8)]
        await asyncio.wait_for(queue.join(), 120)
        for w in workers:
            w.cancel()
        assert running.found() == set(running.truth)
        assert running.fetches() == len(fetched) == len(seen)
        assert sum(sum(log.requests.values()) for log in running.logs) == len(fetched)
        assert len(fetched) > 2 * len(running.truth)
        assert {running.content_of(u) for u in fetched} - {None} == set(running.truth)
        running.reset()
        assert running.fetches() == 0 and not running.found()


async def test_the_servers_count_every_request_and_answer_robots_and_404():
    site = build(7, pages=120)
    async with site.serve() as running, aiohttp.ClientSession() as http:
        for s in running.seeds:
            for _ in range(2):
                async with http.get(s) as resp:
                    assert resp.status == 200
        async with http.get(running.origins[0] + "/robots.txt") as resp:
            assert resp.status == 200 and "User-agent: *" in await resp.text()
        async with http.get(running.origins[1] + "/no/such/page") as resp:
            assert resp.status == 404
        assert running.fetches() == 2 * len(running.seeds) + 2
        assert running.found() == {f"h{h}:home" for h in range(len(DEFAULT_HOSTS))}
        assert running.logs[0].robots == 1 and running.logs[1].statuses[404] == 1
        assert running.content_of(running.origins[1] + "/no/such/page") is None


# -- each pattern -------------------------------------------------------------------------------


def _drop(url: str, *names: str, value: str | None = None) -> str:
    parts = urlsplit(url)
    q = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
         if k not in names or (value is not None and v != value)]
    return urlunsplit(parts._replace(query=urlencode(q)))


def _path(url: str, f) -> str:  # type: ignore[no-untyped-def]
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f(parts.path)))


# pattern -> URL with the pattern's feature taken out: two URLs of a walk that differ but
# are equal after it are the pattern's pairs
STRIP = {
    "sid_query": lambda u: _drop(u, "sid"),
    "sid_path": lambda u: _path(u, lambda p: re.sub(r"^/s/[0-9a-f]{8}(?=/)", "", p)),
    "jsessionid": lambda u: _path(u, lambda p: re.sub(r";jsessionid=[^/]*", "", p)),
    "sort_param": lambda u: _drop(u, "sort"),
    "ref_param": lambda u: _drop(u, "ref"),
    "default_param": lambda u: _drop(_drop(u, "page", value="1"), "per_page"),
    "print_view": lambda u: _path(_drop(u, "print"), lambda p: re.sub(r"^/print(?=/)", "", p)),
    "index_html": lambda u: _path(u, lambda p: re.sub(r"/index\.html$", "/", p)),
    "trailing_slash": lambda u: _path(u, lambda p: p.rstrip("/") or "/"),
    "case_alias": lambda u: _path(u, str.lower),
    "case_distinct": lambda u: _path(u, str.lower),
    "ignored_slug": lambda u: _path(u, lambda p: re.sub(r"^(/[a-z]+/\d+)(/[^/]*)?/?$", r"\1", p)),
    "slug_distinct": lambda u: _path(u, lambda p: re.sub(r"^(/[a-z]+/\d+)/[a-z-]+$", r"\1", p)),
    "rel_loop": lambda u: _path(u, lambda p: re.sub(r"^/help/(?:[a-z]+/)*([a-z]+/)$",
                                                    r"/help/\1", p)),
    "facets": lambda u: _drop(u, "size", "material"),
    "lang_param": lambda u: _drop(u, "lang"),
    "page_param": lambda u: _drop(u, "page"),
}


def pairs(walk: Walk, pattern: str) -> tuple[int, int]:
    """(same-content pairs, different-content pairs) of the walk's URLs that only the
    pattern's feature tells apart; trap pages apart."""
    groups: dict[str, set[str | None]] = {}
    count: dict[str, int] = {}
    for url, (cid, _) in walk.got.items():
        if cid is None:
            continue
        key = STRIP[pattern](url)
        groups.setdefault(key, set()).add(cid)
        count[key] = count.get(key, 0) + 1
    same = sum(count[k] - len(g) for k, g in groups.items())
    diff = sum(len(g) - 1 for g in groups.values())
    return same, diff


def evidence(walk: Walk, site: Site, pattern: str) -> bool:
    """The pattern's signature in a walk of its host."""
    if pattern == "noise":
        url, (_, body) = next(iter(walk.got.items()))
        again = site.respond(0, urlsplit(url).path, 10_000)[2]
        return again != body and main_text(again) == main_text(body)
    if pattern == "calendar":
        months = [u for u in walk.traps if "/calendar/" in u]
        busy = [u for u, c in walk.content().items() if "/calendar/" in u]
        return len(months) >= 10 and len(busy) >= 3 and not walk.ended
    same, diff = pairs(walk, pattern)
    if pattern in ("sid_query", "sid_path", "jsessionid"):
        return same >= 50 and not walk.ended  # a fresh id on every response: no end
    if pattern == "facets":
        return same >= 10 and any("/shop/" in u for u in walk.traps)
    if pattern in ("lang_param", "page_param"):  # changes some pages, not others
        return same >= 3 and diff >= 3
    if pattern in ("case_distinct", "slug_distinct"):  # looks like an alias, is not
        return diff >= 2
    if pattern == "print_view":
        prints = [b for u, (c, b) in walk.got.items() if STRIP[pattern](u) != u]
        return same >= 3 and all("<nav>" not in b for b in prints)
    return same >= 3


@pytest.fixture(scope="module")
def plain() -> tuple[Site, Walk]:
    site = build(11, [set()], pages=60)
    return site, Walk(site, 2000)


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_each_pattern_is_there_when_on_and_only_then(pattern, plain):
    site = build(11, [{pattern}], pages=60)
    walk = Walk(site, 700)
    assert evidence(walk, site, pattern), pattern
    base_site, base_walk = plain
    assert base_walk.ended and set(base_walk.content().values()) == set(base_site.truth)
    assert not evidence(base_walk, base_site, pattern), pattern


def test_the_tempting_rules_are_wrong_on_the_site_itself():
    """What a learner must not conclude: that lang or page never change a page, that the
    wiki's paths are case-insensitive, that the guides' last segment is a slug."""
    site = build(12, [{"lang_param", "page_param"}, {"case_distinct", "slug_distinct",
                                                     "ignored_slug"}], pages=160)
    docs = [site.node(c) for c in site.truth if ":docs:" in c and not c.endswith(":index")]
    doc = next(n for n in docs if n.id.endswith(":en"))
    o0, o1 = site.origins
    assert len({site.content_of(f"{o0}{doc.path}?lang={x}") for x in ("en", "de", "fr")}) == 3
    assert site.content_of(f"{o0}/about/?lang=de") == site.content_of(f"{o0}/about/")
    item = next(site.node(c) for c in sorted(site.truth) if c.startswith("h0:item:"))
    listing = item.path.split("/")[1]
    assert site.content_of(f"{o0}{item.path}?page=2") == item.id
    assert site.content_of(f"{o0}/{listing}/?page=2") != site.content_of(f"{o0}/{listing}/")
    wiki = [site.node(c).path for c in site.truth if ":wiki:" in c and "index" not in c]
    twins = [(p, q) for p in wiki for q in wiki if p < q and p.lower() == q.lower()]
    assert twins
    for p, q in twins:
        assert site.content_of(o1 + p) != site.content_of(o1 + q)
        assert None not in (site.content_of(o1 + p), site.content_of(o1 + q))
    guide = next(site.node(c) for c in sorted(site.truth) if ":guide:" in c)
    chapters = {site.content_of(f"{o1}{guide.path.rsplit('/', 1)[0]}/{ch}")
                for ch in ("overview", "installation", "configuration", "troubleshooting",
                           "reference")} - {None}
    assert len(chapters) == 3
    art = next(site.node(c) for c in sorted(site.truth) if c.startswith("h1:item:"))
    assert site.content_of(f"{o1}{art.path.rsplit('/', 1)[0]}/whatever-slug") == art.id
