"""A reproducible crawl-like link stream of any length, in bounded memory.

Why a second generator: ``stream.py``'s pages (10 hosts, 50 links) keep every
article id ever handed out in per-host lists, so its memory grows with the
stream; a scale benchmark running to 10M+ distinct URLs needs a stream whose
generator costs the same at the 100 millionth URL as at the first and does not
inflate the RSS of the process it feeds. Here each host is one counter: article
``i`` of host ``h`` is a pure function of ``(h, i)``, so any earlier URL can be
linked again without being remembered.

Each page (one of a host's articles, the host's root at first) carries
``links`` raw hrefs (75 by default), in the forms real pages use:

* the host's navigation, the same text on every page of the host: root- and
  folder-relative, dot segments (``../index.html``, ``../../privacy.html``),
  fragments (``#top``, ``/about/#team``), tracking parameters (``utm_*``,
  ``gclid``), a protocol-relative and a mixed-case absolute link, ``mailto:`` and
  ``javascript:`` (rejected), and ``?sort=asc`` (a new URL on every page);
* links to other hosts' roots (hosts drawn by popularity);
* links to the host's articles long ago (uniform over all its articles), to
  other hosts' old articles, and to its recent ones (the last ``recent``);
* ``fresh`` links to articles never linked before.

An article link takes one of seven forms, chosen by ``(id + page) % 7`` so that
the same URL arrives written differently: absolute, root-relative with a
fragment, ``../`` relative, ``./`` with tracking parameters, protocol-relative,
upper-case host with ``gclid``/``fbclid``, and folder-relative. One article in
five has a query whose parameters are out of order. Host popularity is Zipf
(``rank ** -zipf``) over ``hosts`` hosts. With the defaults about 80% of the
links are repeats; the exact share depends on the length of the run (new hosts
bring new navigation) and the benchmark measures it.

Every form resolves to the same key under WHATWG parsing + the project's
canonicalization and under ``urljoin`` + w3lib's ``url_query_cleaner`` (for
:data:`TRACKING`) + ``canonicalize_url``, so every implementation counts the
same distinct URLs; the scale benchmark asserts it.
"""

from __future__ import annotations

import numpy as np

# Tracking parameters the stream uses (all stripped by the project's default rules);
# a peer without the project's rules must strip exactly these to count the same URLs.
TRACKING = ("utm_source", "utm_medium", "utm_campaign", "gclid", "fbclid")

SECTIONS = 10
# Host-independent navigation (every page of every host carries these).
NAV = ("/", "/about/", "/contact/", "/about/#team", "/newsletter/?utm_source=nav&utm_medium=web",
       "/?utm_campaign=home", *(f"/s{s}/" for s in range(SECTIONS)),
       *(f"/tag/{t}/" for t in range(6)), "../index.html", "./", "../../privacy.html",
       "#top", "#", "javascript:void(0)", "?sort=asc", "/search?q=&gclid=nav")
CROSS_HOSTS = 3     # links to other hosts' roots
OLD_SAME = 8        # the host's articles, uniformly over all of them (mostly long ago)
OLD_OTHER = 4       # other hosts' articles, uniformly
RECENT = 6          # the host's recent articles
_HOST_NAV = 3       # host-specific navigation links (see _host_nav)
_PER_PAGE_DRAWS = 1 + CROSS_HOSTS + OLD_OTHER  # host draws per page
_PER_PAGE_UNIFORMS = 1 + OLD_SAME + OLD_OTHER + RECENT  # article draws per page

Page = tuple[str, list[str]]


def _host_nav(h: int) -> list[str]:
    return [f"https://WWW.Site{h}.Example/feed.xml", f"//www.site{h}.example/account/",
            f"mailto:desk@site{h}.example"]


class CrawlStream:
    """Pages of a simulated broad crawl, generated ``chunk(n)`` pages at a time.

    Deterministic for given arguments: two instances yield the same pages, which
    is what lets separate processes be fed the same stream.
    """

    def __init__(self, *, seed: int = 1, hosts: int = 20_000, zipf: float = 1.0,
                 links: int = 75, fresh: int = 14, recent: int = 200) -> None:
        fixed = len(NAV) + _HOST_NAV + CROSS_HOSTS + OLD_SAME + OLD_OTHER + RECENT
        if links < fixed + 1:
            raise ValueError(f"links must be at least {fixed + 1}, not {links}")
        if not 1 <= fresh <= links - fixed:
            raise ValueError(f"fresh must be 1..{links - fixed} for {links} links, not {fresh}")
        if hosts < 2:
            raise ValueError(f"hosts must be at least 2, not {hosts}")
        self.links, self.fresh, self.recent = links, fresh, recent
        # the rest of the page repeats the navigation from its start
        self._nav = [*NAV, *NAV][:links - fixed - fresh + len(NAV)]
        weights = np.arange(1, hosts + 1, dtype=np.float64) ** -zipf
        self._cdf = np.cumsum(weights) / weights.sum()
        self._rng = np.random.default_rng(seed)
        self._articles = [0] * hosts  # article ids handed out per host
        self.pages = 0

    def chunk(self, n: int) -> list[Page]:
        """The next ``n`` pages: ``(page_url, raw_hrefs)``."""
        rng = self._rng
        # one draw of whole rows: the stream does not depend on how it is chunked
        u = rng.random((n, _PER_PAGE_DRAWS + _PER_PAGE_UNIFORMS))
        hosts = np.searchsorted(self._cdf, u[:, :_PER_PAGE_DRAWS]).tolist()
        draws = u[:, _PER_PAGE_DRAWS:].tolist()
        arts, article = self._articles, _article
        pages = []
        for hs, us in zip(hosts, draws, strict=True):
            p = self.pages
            self.pages = p + 1
            h = hs[0]
            na = arts[h]
            if na:
                pid = int(us[0] * na)
                sec = pid % SECTIONS
                page = f"https://www.site{h}.example{_path(pid)}"
            else:
                sec = -1
                page = f"https://www.site{h}.example/"
            hrefs = [*self._nav, *_host_nav(h)]
            hrefs += [f"https://www.site{o}.example/" if o & 1 else f"HTTPS://WWW.SITE{o}.EXAMPLE"
                      for o in hs[1:1 + CROSS_HOSTS]]
            hrefs += [article(h, int(u * na), p, sec) if na else "/"
                      for u in us[1:1 + OLD_SAME]]
            for o, u in zip(hs[1 + CROSS_HOSTS:], us[1 + OLD_SAME:1 + OLD_SAME + OLD_OTHER],
                            strict=True):
                no = arts[o]
                hrefs.append(article(o, int(u * no), p, -2) if no
                             else f"//www.site{o}.example/")
            window = min(na, self.recent)
            hrefs += [article(h, na - 1 - int(u * window), p, sec) if window else "./"
                      for u in us[1 + OLD_SAME + OLD_OTHER:]]
            hrefs += [article(h, i, p, sec) for i in range(na, na + self.fresh)]
            arts[h] = na + self.fresh
            pages.append((page, hrefs))
        return pages


def _path(i: int) -> str:
    """Path (and query) of article ``i``: one in five has parameters out of order."""
    return f"/s{i % SECTIONS}/a{i}.html?v=2&p={i % 7}" if i % 5 == 0 else \
        f"/s{i % SECTIONS}/a{i}.html"


def _article(h: int, i: int, page: int, sec: int) -> str:
    """A link to article ``i`` of host ``h`` from a page in section ``sec`` of ``h``
    (``sec`` -1: the host's root; -2: a page of another host, absolute forms only)."""
    form = (i + page) % 7
    if sec == -2:
        form = (0, 4, 5)[form % 3]
    s = i % SECTIONS
    q = f"?v=2&p={i % 7}" if i % 5 == 0 else ""
    if form == 0:
        return f"https://www.site{h}.example/s{s}/a{i}.html{q}"
    if form == 1:
        return f"/s{s}/a{i}.html{q}#c"
    if form == 2 and sec >= 0:
        return f"../s{s}/a{i}.html{q}"
    if form == 3:
        sep = "&" if q else "?"
        return f"/s{s}/./a{i}.html{q}{sep}utm_source=feed&utm_medium=rss"
    if form == 4:
        return f"//www.site{h}.example/s{s}/a{i}.html{q}"
    if form == 5:
        sep = "&" if q else "?"
        return f"https://WWW.SITE{h}.EXAMPLE/s{s}/a{i}.html{q}{sep}gclid=g{i}&fbclid=f{page}"
    if form == 6 and sec == s:
        return f"a{i}.html{q}"
    return f"/s{s}/../s{s}/a{i}.html{q}"
