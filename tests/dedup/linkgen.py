"""Links shaped like the ones pages contain, for the compiled-vs-Python canonicalization tests.

Deterministic (a seeded ``random.Random``) and fast enough to make a million in a few
seconds: each link is put together from pools of parts (scheme and authority, path
segments, query parameters, fragment, surrounding whitespace), mostly ordinary ones
(relative and absolute, ``./`` and ``../``, tracking parameters, escapes in every case,
mixed-case hosts, default and other ports, ``//host``, ``?q``, ``#f``, empty), with
the unusual ones the compiled path must hand back to the Python path (non-ASCII,
control characters, backslashes, userinfo, IP hosts, IDNA, odd ports, ``%2e``) at a
low rate.
"""

from __future__ import annotations

import random

WORDS = ("news", "a", "b", "index.html", "story-12.html", "s3", "Tag", "x.php", "img",
         "about", "2024", "~user", "wiki", "Caf%C3%A9", "p", "z-y_x", "feed.xml", "UPPER")
SEGMENTS = (".", "..", "", "%41", "%7e", "%7E", "%2f", "%2F", "%zz", "%", "%4", "%25",
            "a%20b", "a b", "^", "{x}", "`", '"q"', "<t>", "'", ":", "@", "!$&'()*+,;=",
            "~", "|", "%2e", "%2E%2e", ".%2e", "...", ".x", "x.", "a:b", "%c3%a9", "%5F")
WEIRD = ("\\", "\t", "\n", "\r", "\x00", "\x01", "\x7f", "é", "日本", "\ud800", " ", "\x1f",
         "#", "?", "[", "]", "%", "@", ":")
HOSTS = ("example.com", "WWW.Example.COM", "h.test", "cdn3.site-7.example", "A.B.C",
         "a_b.test", "x-.test", "-x.test", "sub.domain.example.org", "h.test.", "h..test",
         ".h.test", "1.2.3.4", "0x7f.1", "h.123", "h.1a", "xn--bcher-kva.example",
         "XN--a.b", "bücher.example", "[::1]", "[2001:db8::1]", "user@h.test",
         "u:p@h.test", "h%41.test", "h.test:", "h test", "h\\.test", "")
PORTS = ("", "", "", "", ":80", ":443", ":8080", ":0", ":", ":65535", ":65536", ":080",
         ":00443", ":8o", ":99999", ":1")
SCHEMES = ("http://", "https://", "HTTP://", "HtTpS://", "http:", "https:", "http:/",
           "https:///", "http:\\\\", "ftp://", "ws://", "file:///", "javascript:",
           "mailto:", "data:", "tel:", "a+b.c-d:", "1http:", "httpx://", "http s://")
PARAM_NAMES = ("utm_source", "UTM_Medium", "utm_", "utm", "gclid", "GCLID", "fbclid",
               "_ga", "_gl", "mc_cid", "utm%5Fsource", "id", "page", "q", "a", "b", "B",
               "sort", "ref", "", "x y", "k'v", "%41", "a.b", "_", "utm_campaign")
VALUES = ("", "1", "2", "x", "%20", "a+b", "%7e", "%e2%82%ac", "=", "==", "?", "/", "a b",
          "'", '"', "<", ">", "%", "%zz", "utm_source")
FRAGMENTS = ("", "", "", "#", "#top", "#a#b", "#x y", "#é", "#\t", "#?q", "#/../x")
LEADS = ("", "", "", "", "", "", "", " ", "  ", "\n", "\t", "\x01 ")
TRAILS = ("", "", "", "", "", "", "", " ", "\n", " \r\n", "\x00")
PAGES = ("https://www{n}.example.com/{d}/{f}", "http://h{n}.test/{d}/", "https://h{n}.test/",
         "http://Site{n}.EXAMPLE:8080/{d}/{f}?q=1&utm_source=x", "https://h{n}.test/{f}#frag",
         "https://h{n}.test/{d}/%7efile?a=%41", "http://u:p@h{n}.test/{d}/{f}",
         "https://h{n}.test:443/{d}/{d}/{f}", "http://h{n}.test/{d}/a%2fb/{f}",
         "https://h{n}.test/caf%c3%a9/{f}", "https://h{n}.test/{d}/{f}?", "http://[::1]/{f}",
         "https://bücher{n}.example/{f}", "http://h{n}.test/ä/{f}", "about:blank",
         "file:///tmp/{f}", "https://h{n}.test/{d}/.%2e/{f}", "https://h{n}.test/{d}/x y/{f}")


class LinkGen:
    """``page(rng)`` and ``link(rng)`` draw from the pools; ``pages(n, k)`` yields ``n``
    (page URL, ``k`` links) pairs."""

    def __init__(self, seed: int, weird: float = 0.02) -> None:
        self.rng = random.Random(seed)
        self.weird = weird

    def page(self) -> str:
        r = self.rng
        return r.choice(PAGES).format(n=r.randrange(50), d=r.choice(WORDS), f=r.choice(WORDS))

    def _segment(self) -> str:
        r = self.rng
        x = r.random()
        if x < 0.7:
            return r.choice(WORDS)
        if x < 0.97:
            return r.choice(SEGMENTS)
        return r.choice(WORDS) + r.choice(WEIRD) + r.choice(WORDS)

    def _path(self) -> str:
        r = self.rng
        return "/".join(self._segment() for _ in range(r.randrange(0, 5)))

    def _query(self) -> str:
        r = self.rng
        params = []
        for _ in range(r.randrange(0, 6)):
            name = r.choice(PARAM_NAMES)
            x = r.random()
            if x < 0.15:
                params.append(name)
            elif x < 0.2:
                params.append("")
            else:
                params.append(f"{name}={r.choice(VALUES)}")
        return "&".join(params)

    def link(self) -> str:
        r = self.rng
        x = r.random()
        if x < 0.04:
            return r.choice(("", "#", "?", "#top", " ", "/", "//", "./", "../", "..", ".",
                             "?#", "javascript:void(0)", "mailto:x@y.z"))
        if x < 0.3:
            head = r.choice(SCHEMES[:4] if r.random() < 0.85 else SCHEMES)
            host = r.choice(HOSTS[:5]) if r.random() < 0.8 else r.choice(HOSTS)
            port = r.choice(PORTS[:8]) if r.random() < 0.9 else r.choice(PORTS)
            link = f"{head}{host}{port}/{self._path()}"
        elif x < 0.4:
            link = f"//{r.choice(HOSTS[:6])}{r.choice(PORTS[:6])}/{self._path()}"
        elif x < 0.65:
            link = "/" + self._path()
        elif x < 0.72:
            link = ""
        else:
            link = r.choice(("", "", "", "./", "../", "../../", "./../")) + self._path()
        y = r.random()
        if y < 0.35:
            link += "?" + self._query()
        elif y < 0.37:
            link += "?"
        link += r.choice(FRAGMENTS)
        if r.random() < 0.15:
            link = r.choice(LEADS) + link + r.choice(TRAILS)
        if r.random() < self.weird:
            at = r.randrange(len(link) + 1)
            link = link[:at] + r.choice(WEIRD) + link[at:]
        return link

    def pages(self, n: int, k: int = 50) -> list[tuple[str, list[str]]]:
        return [(self.page(), [self.link() for _ in range(k)]) for _ in range(n)]
