"""Which tag names a page's bytes can hold (crawler/net/_markup.c), and the main text it
lets links.py find with fewer walks of the tree: the same text as walking for every
name, on markup that writes the names in any case, hides them in comments, scripts
and attributes, or is not ASCII-compatible (UTF-16, a charset decoded in Python)."""

from __future__ import annotations

import codecs
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.net import links
from crawler.net.links import BOILERPLATE, extract_page

NAMES = (*BOILERPLATE, "main")


@pytest.fixture(autouse=True)
def markup() -> object:
    """The compiled scanner; CI (BLOOMCRAWL_REQUIRE_KERNEL=1) fails where it did not build."""
    if links._markup is None:
        if os.environ.get("BLOOMCRAWL_REQUIRE_KERNEL") == "1":
            pytest.fail("crawler.net._markup is not built; BLOOMCRAWL_REQUIRE_KERNEL=1 "
                        "requires it", pytrace=False)
        pytest.skip("crawler.net._markup is not built")
    return links._markup


def reference(data: bytes, names: tuple[str, ...]) -> tuple[str, ...]:
    if b"\x00" in data:
        return names
    return tuple(n for n in names
                 if re.search(b"<" + re.escape(n.encode()), data, re.IGNORECASE))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"<", b"<NaV", b"<foot", b"er", b"<script ", b"<MAIN>",
                                 b"x", b"\xff", b"<svG", b"<aside", b"<", b"\x00", b" "]),
                max_size=30),
       st.binary(max_size=40))
def test_start_tags_as_a_search_of_every_name_finds_them(pieces, noise):
    data = b"".join(pieces) + noise
    assert links._markup.start_tags(data, NAMES) == reference(data, NAMES)


def test_start_tags_refuses_names_it_cannot_search_for():
    scan = links._markup.start_tags
    for bad in (("NAV",), ("",), ("x" * 33,), (b"nav",), ("né",)):
        with pytest.raises((ValueError, TypeError)):
            scan(b"<nav>", bad)
    with pytest.raises(ValueError, match="at most"):
        scan(b"", tuple(f"n{i}" for i in range(65)))
    with pytest.raises(TypeError):
        scan("<nav>", ("nav",))  # text, not bytes


def test_start_tags_answers_for_the_names_of_each_call():
    """The kernel files the last call's names once (links.py asks about one tuple at
    every page): another tuple, one refused between, and the first again each get
    their own answer."""
    scan = links._markup.start_tags
    data = b"<p>x</p><NAV>menu</NAV><aside>a</aside>"
    other = ("aside", "footer", "p")
    for _ in range(2):
        assert scan(data, NAMES) == reference(data, NAMES)
        assert scan(data, other) == ("aside", "p")
        with pytest.raises(ValueError):
            scan(data, ("NAV",))
        assert scan(data, tuple(n for n in other)) == ("aside", "p")  # an equal tuple
        assert scan(data, ()) == ()


PAGES = [
    "<html><body><h1>Title words here</h1><p>one two three four five six seven</p>"
    "<ul><li><a href='/a'>listed link</a></li></ul><footer>foot words</footer></body></html>",
    "<HTML><BODY><NAV>menu words</NAV><p>body text of the page, long enough</p>"
    "<Script>var x = '<footer>'</Script><FOOTER>foot</FOOTER></BODY></HTML>",
    "<body><!-- <nav>not a nav</nav> --><p>text</p><div title='<aside>'>kept words</div>"
    "<aside>aside words</aside></body>",
    "<body><Main><p>main words only</p></Main><p>outside main</p><main>second</main></body>",
    "<body><header>head</header><svg><text>svg words</text></svg><template><p>t</p>"
    "</template><select><option>opt</option></select><button>press</button>"
    "<noscript>ns</noscript><style>p{}</style><p>the text</p></body>",
    "<body><p>no boilerplate at all, only text and <a href='/x'>a link</a></p></body>",
]


@pytest.mark.parametrize("html", PAGES)
@pytest.mark.parametrize("charset", [None, "utf-8", "utf-16", "windows-1252"])
def test_the_main_text_is_the_one_every_walk_finds(html, charset, monkeypatch):
    body = html.encode(charset or "utf-8")
    got = extract_page(body, "http://h.test/p", charset=charset)
    monkeypatch.setattr(links, "_markup", None)
    assert got == extract_page(body, "http://h.test/p", charset=charset)


@pytest.mark.parametrize("html", PAGES)
@pytest.mark.parametrize("bom", [codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE])
def test_utf16_by_its_byte_order_mark_is_walked_for_every_name(html, bom, monkeypatch):
    """lexbor reads UTF-16 by its BOM (the bytes then hold no ASCII "<nav"): the page's
    text is the same as with every walk."""
    body = bom + html.encode("utf-16-le" if bom == codecs.BOM_UTF16_LE else "utf-16-be")
    got = extract_page(body, "http://h.test/p")
    monkeypatch.setattr(links, "_markup", None)
    want = extract_page(body, "http://h.test/p")
    assert got == want
    assert "foot" not in (got[2] or "") and "menu" not in (got[2] or "")
