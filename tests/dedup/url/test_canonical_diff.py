"""The compiled canonicalization fast path (dedup/native/_canon.c) against the Python path.

The compiled path is only speed: for every link it either answers exactly what the
Python path answers (byte for byte, rejections included) or hands the link back to
it. Compared here on a million generated links shaped like real ones (tests/dedup/
linkgen.py), on hypothesis' links, on every input of the WHATWG test data, under other
rules, and on inputs meant to break C code (NUL, lengths at and past every buffer,
non-str items, hostile sequences). With ``BLOOMCRAWL_NO_KERNEL=1`` these skip:
test_canonical.py then runs the Python path alone.

The suite compares 200,000 generated links (~5 s of CPU); the million the issue asks
for (~27 s of CPU, too long for every run of the suite) with
``BLOOMCRAWL_CANON_DIFF_LINKS=1000000``. They come in five chunks that xdist spreads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup.native import compiled
from dedup.url.canonical import Canonicalizer, CanonRules
from dedup.url.urlform import page_contexts
from tests.dedup import linkgen
from tests.dedup.conftest import require_kernel

WPT_DATA = Path(__file__).parents[2] / "data" / "urltestdata.json"
DIFF_LINKS = int(os.environ.get("BLOOMCRAWL_CANON_DIFF_LINKS", "200000"))
CHUNKS = 5


@pytest.fixture(autouse=True)
def native() -> object:
    require_kernel()
    return compiled.canon


def python_results(pages: list[tuple[str | None, list]], rules: CanonRules,
                   monkeypatch: pytest.MonkeyPatch) -> list[list]:
    """What the Python path alone answers (today's canonicalizer, its cache included)."""
    with monkeypatch.context() as m:
        m.setattr(compiled, "canon", None)
        canon = Canonicalizer(rules)
        return [canon.resolve_many(links, page) for page, links in pages]


def assert_same(pages: list[tuple[str | None, list]], rules: CanonRules,
                monkeypatch: pytest.MonkeyPatch) -> Canonicalizer:
    fast = Canonicalizer(rules)
    got = [fast.resolve_many(links, page) for page, links in pages]
    want = python_results(pages, rules, monkeypatch)
    if got != want:
        diffs = [(page, link, g, w) for (page, links), gs, ws in zip(pages, got, want, strict=True)
                 for link, g, w in zip(links, gs, ws, strict=True) if g != w]
        pytest.fail(f"{len(diffs)} links differ, first ones (page, link, compiled, python):\n"
                    + "\n".join(map(repr, diffs[:10])))
    return fast


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_compiled_equals_python_on_generated_links(chunk: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pages = linkgen.LinkGen(seed=1000 + chunk).pages(DIFF_LINKS // CHUNKS // 50, 50)
    fast = assert_same(pages, CanonRules(), monkeypatch)
    n = sum(len(links) for _, links in pages)
    # most links are the compiled path's, and it does not take them all
    assert 0.5 * n < fast.cache_info()["compiled"] < 0.9 * n


RULES = [
    CanonRules(sort_query=False),
    CanonRules(strip_params=("ID", "Page*", "q"), max_length=60),
    CanonRules(strip_params=("*",)),
    CanonRules(strip_params=(), max_length=1),
    CanonRules(strip_params=("k'v", "a.b", "x y", "\u212a", "caf\u00e9*", "utm%5f*")),
]


@pytest.mark.parametrize("rules", RULES, ids=range(len(RULES)))
def test_compiled_equals_python_under_other_rules(rules: CanonRules,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pages = linkgen.LinkGen(seed=7).pages(400, 50)
    pages += [("http://h.test/", ["/?K=1&k=2&KV=3", "/?Id=1&page=2&pageX&q", "/?b&a=1&=x&&A"])]
    assert_same(pages, rules, monkeypatch)


@pytest.mark.parametrize("lengths", [(62, 63), (64, 65, 70)], ids=["below_64", "from_64"])
def test_compiled_equals_python_with_long_parameter_names(lengths: tuple[int, ...],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled rules sort a name out by its length before comparing it (one bit a
    length, the last bit for 63 and longer): names on either side of that last bit."""
    rules = CanonRules(strip_params=tuple("n" * k for k in lengths))
    links = [f"/?{c * k}=1&a=2" for k in range(60, 72) for c in "nN"]
    pages = [("http://h.test/", links)]
    fast = assert_same(pages, rules, monkeypatch)
    assert fast.cache_info()["compiled"] == len(links)


def _wpt_cases() -> list[dict]:
    return [c for c in json.loads(WPT_DATA.read_text(encoding="utf-8")) if isinstance(c, dict)]


def test_compiled_equals_python_on_the_wpt_data(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = _wpt_cases()
    pages: list[tuple[str | None, list]] = [(c["base"], [c["input"]]) for c in cases]
    pages += [(None, [c["input"] for c in cases])]
    http_bases = sorted({c["base"] for c in cases if c["base"]
                         and c["base"].startswith(("http:", "https:"))})
    pages += [(base, [c["input"] for c in cases]) for base in http_bases]
    assert len(pages) > 800
    assert_same(pages, CanonRules(), monkeypatch)


PARTS = st.sampled_from(
    ["http://", "https://", "HTTP://", "//", "/", "./", "../", "..", ".", "?", "#", "&", "=",
     "%", "%2", "%41", "%7e", "%2e", "%2E", "%zz", ":", ":80", ":443", ":8080", ":0", "@",
     "a", "B", "h.test", "WWW.H.Test", "xn--", "1", "0x", "-", "_", "~", " ", "\t", "\n",
     "\\", "\x00", "\x7f", "é", "[", "]", "^", "{", "'", '"', "<", "`", "utm_source", "gclid",
     "mailto:", "javascript:", "ftp:", "http:", "https:", "127.0.0.1", "1.2.3.4", "255.",
     "256", "0.0", "00"])
LINKS = st.one_of(st.lists(PARTS, max_size=12).map("".join),
                  st.text(max_size=30),
                  st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e),
                          max_size=40))
PAGES = st.one_of(st.sampled_from(["https://h.test/", "http://H.test:8080/a/b/c?x=1#f",
                                   "https://u:p@h.test/a/", "http://h.test/a%2fb/c%7e",
                                   "http://[::1]/x", "https://xn--bcher-kva.example/",
                                   "file:///x", "about:blank"]),
                  st.builds("{}{}".format, st.sampled_from(["http://h.test/", "https://g.test"]),
                            st.lists(PARTS, max_size=6).map("".join)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page=st.one_of(st.none(), PAGES), links=st.lists(LINKS, max_size=8))
def test_property_compiled_equals_python(page: str | None, links: list[str]) -> None:
    fast = Canonicalizer()
    got = fast.resolve_many(links, page)
    native = compiled.canon
    compiled.canon = None  # hypothesis runs the body many times: no monkeypatch scope
    try:
        want = Canonicalizer().resolve_many(links, page)
    finally:
        compiled.canon = native
    assert got == want


# -- inputs meant to break C code ----------------------------------------------------------

class Weird(str):
    """A str subclass whose methods lie: only the Python path may read it."""

    def startswith(self, *args: object) -> bool:
        return True


def test_odd_items_go_to_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    long_ok = "/" + "a" * 2000
    links = ["/a\x00b", "\x00", "/x#\x00", "a" * 100_000, "/" + "a" * 4094, "/" + "a" * 4095,
             "/" + "a" * 4096, long_ok, "/" + "%" * 4095, "/" + "^" * 4095, "?" + "'" * 4095,
             "/" + "b" * 2070, "/" + "b" * 2071, "/" + "b" * 2072,
             "/?" + "&".join(f"p{i}=1" for i in range(300)),
             "/?" + "&".join(f"p{i % 7}={i}" for i in range(256)),
             "/?" + "&".join(f"p{i}" for i in range(257)),
             b"/bytes", None, 3, 1.5, ("/t",), ["/l"], Weird("/weird"), Weird("mailto:x"),
             "\ud800", "/\udfff", "", " ", "\x01/x", "/x\x01", "\t/x", "/x\n"]
    pages = [("https://h.test/a/b", links), ("http://h.test", links), (None, links)]
    assert_same(pages, CanonRules(), monkeypatch)
    fast = Canonicalizer()
    got = fast.resolve_many(links, "https://h.test/a/b")
    assert got[links.index(long_ok)] == (f"https://h.test{long_ok}",) * 2
    assert got[links.index(b"/bytes")] is None


def test_any_iterable_of_links_and_a_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    links = ["/a", "b", "mailto:x", "/é"]

    def gen() -> Iterator[str]:
        yield from links
    fast = Canonicalizer()
    want = python_results([("http://h.test/", links)], CanonRules(), monkeypatch)[0]
    assert fast.resolve_many(gen(), "http://h.test/") == want
    assert fast.resolve_many(tuple(links), "http://h.test/") == want
    assert fast.resolve_many(dict.fromkeys(links), "http://h.test/") == want
    assert fast.resolve_many([], "http://h.test/") == []


def test_dotted_decimal_ipv4_hosts_are_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """"a.b.c.d" (0..255, no leading zeros) is what WHATWG writes for an IPv4 host, so
    the compiled path takes it; every other numeric host goes to the Python path."""
    quads = ["http://127.0.0.5:8000/p/1.html", "//10.0.0.255/A?b=1&utm_source=x",
             "https://0.0.0.0/", "http://255.255.255.255:80/x#f", "http://1.2.3.4/../a"]
    others = ["http://127.0.0.05/x", "http://127.1/", "http://0x7f.0.0.1/", "http://256.0.0.1/",
              "http://1.2.3.4./a", "http://1.2.3.4.5/", "http://01.2.3.4/", "http://1.2.3/",
              "http://1..2.3/", "http://1.2.3.999/", "http://1.2.3.4%2e/", "http://a.1/",
              "http://1.2.3.1000/", "http://1.2.3.4a/"]
    pages = [("http://127.0.0.2:8000/a/b", quads + others), ("https://h.test/", quads + others)]
    fast = assert_same(pages, CanonRules(), monkeypatch)
    assert fast.cache_info()["compiled"] == 2 * len(quads)


def test_idna_hosts_and_empty_labels_go_to_the_python_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with "xn-" anywhere (IDNA: ada may check or decode it) or an empty label is
    the Python path's, whatever the case of its letters; the same hosts without it are
    compiled."""
    plain = ["http://x.test/", "//xx.test/a", "https://X-N.test:8080/", "http://ax.test",
             "http://wxn.test/", "http://x.xn/", "http://a.test.x/?q"]
    others = ["http://xn--a.test/", "//XN--zz.test/", "http://a.xN--9/x", "http://wxn--q.test/",
              "http://xn-.test/", "https://a.Xn-/", "http://a..b/x", "http://.a/", "//a.b../"]
    pages = [("http://h.test/a/b", plain + others)]
    fast = assert_same(pages, CanonRules(), monkeypatch)
    assert fast.cache_info()["compiled"] == len(plain)


def test_the_compiled_path_counts_what_it_resolved() -> None:
    fast = Canonicalizer()
    fast.resolve_many(["/a", "b?utm_source=x", "mailto:x", "/é", "\\x", "#t"], "http://h.test/")
    assert fast.cache_info() | {"size": 0} == {"hits": 0, "misses": 2, "size": 0,
                                               "maxsize": 100_000, "compiled": 4}


def test_native_arguments_are_checked(native: object) -> None:
    rules = native.compile_rules(2083, True, ("gclid",), ("utm_",))
    page = page_contexts("http://h.test/a/b")
    out, pending = native.resolve_links(["/x", "é"], rules, page)
    assert out == [("http://h.test/x",) * 2, "é"] and pending == [1]
    # a page it does not understand: every link is handed back
    for bad_page in [("http", "http:"), ("ftp", "ftp:", "ftp://h", "ftp://h/", "ftp://h/x",
                                         "ftp://h/x"), "http://h.test/",
                     ("http", "http:", "http://h", "http://h/", "http://h/x", b"http://h/x"),
                     ("http", "http:", "http://h", "http://g/", "http://h/x", "http://h/x"),
                     ("http", "http:", "http://h", "http://h", "http://h", "http://h"),
                     ("http", "http:", "http://é", "http://é/", "http://é/", "http://é/")]:
        assert native.resolve_links(["/x", "y"], rules, bad_page) == (["/x", "y"], [0, 1])
    with pytest.raises(ValueError):
        native.resolve_links(["/x"], object(), page)
    with pytest.raises(TypeError):
        native.resolve_links(3, rules, page)
    with pytest.raises(TypeError):
        native.compile_rules(2083, True, ["gclid"], ())
    with pytest.raises(TypeError):
        native.compile_rules(2083, True, (b"gclid",), ())
    with pytest.raises(ValueError):
        native.compile_rules(0, True, (), ())


def test_escapes_of_each_page_context_are_normalized(native: object) -> None:
    """The compiled path skips `finish`'s escape pass for a link without a '%' only where
    no context of the page has one: each context alone with an escape, in a page made
    by hand (page_contexts cuts them from one href, so one holds the others' text)."""
    rules = native.compile_rules(2083, True, (), ())  # type: ignore[attr-defined]
    page = ("https", "https:", "https://h", "https://h/d/", "https://h/d/p?q", "https://h/d/p")
    for at, text, link, want in [(3, "https://h/d%7e/", "x", "https://h/d~/x"),
                                 (4, "https://h/d/p?q=%7e", "", "https://h/d/p?q=~"),
                                 (5, "https://h/d/p%7e", "?y", "https://h/d/p~?y"),
                                 (5, "https://h/d/p", "?y%7e", "https://h/d/p?y~")]:
        made = (*page[:at], text, *page[at + 1:])
        out, pending = native.resolve_links([link], rules, made)  # type: ignore[attr-defined]
        assert (out, pending) == ([(want, want)], []), (at, text, link)


def python_contexts(bases: list[str], monkeypatch: pytest.MonkeyPatch) -> list[object]:
    with monkeypatch.context() as m:
        m.setattr(compiled, "canon", None)
        return [page_contexts(base) for base in bases]


def test_compiled_page_contexts_equal_ada(native: object,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A page URL's contexts cut by the compiled path (``page_contexts`` in _canon.c) are
    ada's, on generated pages and links taken as page URLs and the WPT inputs and bases."""
    pages = linkgen.LinkGen(seed=11).pages(1000, 50)
    bases = [url for base, links in pages for url in (base, *links)]
    cases = _wpt_cases()
    bases += [c["input"] for c in cases] + [c["base"] for c in cases if c["base"]]
    assert [page_contexts(base) for base in bases] == python_contexts(bases, monkeypatch)
    # most page URLs are the compiled path's, and it does not take them all
    taken = sum(native.page_contexts(base) is not None  # type: ignore[attr-defined]
                for base, _ in pages)
    assert 0.5 * len(pages) < taken < len(pages)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.one_of(PAGES, LINKS))
def test_property_compiled_page_contexts_equal_ada(base: str) -> None:
    fast = page_contexts(base)
    keep, compiled.canon = compiled.canon, None
    try:
        slow = page_contexts(base)
    finally:
        compiled.canon = keep
    assert fast == slow
