"""URL canonicalization: one test per rule, WHATWG conformance, properties, the cache.

Every test runs twice: with the compiled fast path (``dedup.native._canon``) and on
the Python path alone, except the ones that count the cache, which is the Python
path's (they ask for ``python_path``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup.native import compiled
from dedup.url.canonical import (
    DEFAULT_RULES,
    DEFAULT_TRACKING_PARAMS,
    Canonicalizer,
    CanonRules,
    UrlRejected,
    canonicalize,
    normalize,
)
from tests.dedup.conftest import require_kernel

# A copy of /work/shared/crawler_anchors/urltestdata.json (WHATWG URL tests from
# web-platform-tests, via ada-url/ada; see shared/crawler_anchors/SOURCE.md).
WPT_DATA = Path(__file__).parents[2] / "data" / "urltestdata.json"
WPT_SHA256 = "355c9f1e5f34aae66ba8adfabf3c853f5cd30ea22964ef7a53eb292e7975d81e"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    impls = ["python"] if "python_path" in metafunc.fixturenames else ["compiled", "python"]
    metafunc.parametrize("canon_impl", impls, indirect=True)


@pytest.fixture(autouse=True)
def canon_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled canonicalization fast path, or the Python path alone."""
    if request.param == "python":
        monkeypatch.setattr(compiled, "canon", None)
    else:
        require_kernel()
    return request.param


@pytest.fixture
def python_path() -> None:
    """A test of the cache's counters: the links the compiled path resolves never reach
    the cache, so these run on the Python path (``canon_impl``)."""


def both(url: str, base: str | None = None) -> tuple[str, str]:
    return normalize(url, base), canonicalize(url, base)


# -- one test per rule ------------------------------------------------------------------

def test_lowercases_scheme_and_host_but_not_path():
    assert both("HTTP://WWW.Example.COM/Path/File") == ("http://www.example.com/Path/File",) * 2
    assert canonicalize("HtTpS://EXAMPLE.org") == "https://example.org/"


def test_idna_host_becomes_punycode():
    assert canonicalize("http://Bücher.example/") == "http://xn--bcher-kva.example/"
    assert canonicalize("http://xn--bcher-kva.example/") == "http://xn--bcher-kva.example/"
    assert canonicalize("http://例え.テスト/") == "http://xn--r8jz45g.xn--zckzah/"
    # full-width letters and dots are mapped (UTS #46) like browsers do
    assert canonicalize("http://ＥＸＡＭＰＬＥ．com/") == "http://example.com/"


def test_invalid_idna_host_is_rejected():
    for host in ("xn--tešla.test", "\u200d.example", "www\xa0.lookout.net", "a\u202eb.test"):
        with pytest.raises(UrlRejected, match="unparsable URL"):
            canonicalize(f"http://{host}/")


def test_drops_default_ports_only():
    assert both("http://h.test:80/a") == ("http://h.test/a",) * 2
    assert both("https://h.test:443/a") == ("https://h.test/a",) * 2
    assert canonicalize("http://h.test:443/a") == "http://h.test:443/a"
    assert canonicalize("https://h.test:80/a") == "https://h.test:80/a"
    assert canonicalize("http://h.test:0080/") == "http://h.test/"
    assert canonicalize("http://h.test:/") == "http://h.test/"


def test_drops_fragment_in_both_forms():
    assert both("http://h.test/p?q=1#top") == ("http://h.test/p?q=1",) * 2
    assert both("http://h.test/p#") == ("http://h.test/p",) * 2
    assert both("http://h.test/p#a?b=1&c") == ("http://h.test/p",) * 2
    assert both("#section", "http://h.test/p?q#old") == ("http://h.test/p?q",) * 2


def test_resolves_dot_segments():
    assert canonicalize("http://h.test/a/./b/../c") == "http://h.test/a/c"
    assert canonicalize("../../../x", "http://h.test/a/b") == "http://h.test/x"
    assert canonicalize("./", "http://h.test/a/b") == "http://h.test/a/"
    assert canonicalize("http://h.test/a/b/..") == "http://h.test/a/"


def test_percent_encoded_dot_segments_are_resolved():
    assert canonicalize("http://h.test/a/b/%2e%2e/c") == "http://h.test/a/c"
    assert canonicalize("http://h.test/a/b/.%2E/%2e/c") == "http://h.test/a/c"
    assert canonicalize("%2e%2e/x", "http://h.test/a/b/c") == "http://h.test/a/x"
    # not a dot segment: kept, its escape decoded
    assert canonicalize("http://h.test/a/x%2e%2e/c") == "http://h.test/a/x../c"


def test_uppercases_percent_escape_hex():
    assert both("http://h.test/a%3ab/%c3%a9?x=%2f%3d") == (
        "http://h.test/a%3Ab/%C3%A9?x=%2F%3D",) * 2


def test_decodes_escapes_of_unreserved_characters_only():
    assert canonicalize("http://h.test/%41%5a%61%7A%30%39%2D%2E%5F%7E") == (
        "http://h.test/AZaz09-._~")
    # reserved and other characters stay escaped: decoding them would change meaning
    assert canonicalize("http://h.test/a%2Fb%3F?k%3D1=v%26w") == "http://h.test/a%2Fb%3F?k%3D1=v%26w"
    assert canonicalize("http://user%41:p%7e@h.test/") == "http://userA:p~@h.test/"


def test_stray_percent_is_escaped_so_decoding_cannot_form_an_escape():
    assert both("http://h.test/100%") == ("http://h.test/100%25",) * 2
    assert canonicalize("http://h.test/%zz") == "http://h.test/%25zz"
    # "%" + decoded "%41" must not become the escape "%A4"
    assert canonicalize("http://h.test/%%414") == "http://h.test/%25A4"
    assert canonicalize("http://h.test/%%414") != canonicalize("http://h.test/%A4")


def test_empty_path_becomes_slash():
    assert both("http://h.test") == ("http://h.test/",) * 2
    assert both("https://h.test?b=1") == ("https://h.test/?b=1",) * 2


def test_sorts_query_params_by_name_stably():
    url = "http://h.test/p?b=2&a=1&c&b=1&a=0"
    assert canonicalize(url) == "http://h.test/p?a=1&a=0&b=2&b=1&c"
    assert normalize(url) == url  # the fetch form keeps the server's order


def test_query_sort_is_configurable():
    rules = CanonRules(sort_query=False)
    assert canonicalize("http://h.test/p?b=2&a=1&utm_source=x", rules=rules) == (
        "http://h.test/p?b=2&a=1")


def test_drops_default_tracking_params_case_insensitively():
    url = ("http://h.test/p?id=7&utm_source=feed&UTM_Medium=rss&gclid=X&FbClId=Y"
           "&_ga=1&mc_cid=2&mkt_tok=3&utm=keep&xutm_source=keep")
    assert canonicalize(url) == "http://h.test/p?id=7&utm=keep&xutm_source=keep"
    assert normalize(url) == url


def test_tracking_param_names_are_matched_after_unescaping():
    assert canonicalize("http://h.test/p?utm%5Fsource=x&a=1") == "http://h.test/p?a=1"


def test_strip_params_are_configurable_exact_or_prefix():
    rules = CanonRules(strip_params=("sessionid", "ref_*"))
    url = "http://h.test/p?ref_src=tw&SessionID=9&utm_source=x&ref=keep"
    assert canonicalize(url, rules=rules) == "http://h.test/p?ref=keep&utm_source=x"
    assert canonicalize(url, rules=CanonRules(strip_params=())) == (
        "http://h.test/p?SessionID=9&ref=keep&ref_src=tw&utm_source=x")


def test_query_of_only_tracking_params_loses_its_question_mark():
    assert both("http://h.test/p?utm_source=a&utm_medium=b&fbclid=c") == (
        "http://h.test/p?utm_source=a&utm_medium=b&fbclid=c", "http://h.test/p")
    assert canonicalize("?gclid=1", "http://h.test/p?x=1") == "http://h.test/p"


def test_empty_query_and_empty_params_are_dropped_from_the_key():
    assert both("http://h.test/p?") == ("http://h.test/p?", "http://h.test/p")
    assert both("http://h.test/p?b=1&&a=2&") == ("http://h.test/p?b=1&&a=2&",
                                                  "http://h.test/p?a=2&b=1")


@pytest.mark.parametrize("link, scheme", [
    ("mailto:desk@example.com", "mailto"),
    ("javascript:void(0)", "javascript"),
    ("JavaScript:alert(1)", "javascript"),
    ("  javascript:void(0)", "javascript"),
    ("data:text/html,<p>x</p>", "data"),
    ("tel:+15551234", "tel"),
    ("ftp://files.test/a", "ftp"),
    ("file:///etc/passwd", "file"),
    ("ws://h.test/socket", "ws"),
    ("about:blank", "about"),
    ("foo:bar", "foo"),
])
def test_rejects_non_http_schemes(link, scheme):
    msg = f"unsupported scheme '{scheme}'"
    with pytest.raises(UrlRejected, match=f"^{re.escape(msg)}$"):
        canonicalize(link, "http://h.test/page")
    with pytest.raises(UrlRejected, match=msg):
        normalize(link)


@pytest.mark.parametrize("link, base", [
    ("http://", None),
    ("http://[::1/", None),
    ("http://a b.test/", None),
    ("http://h.test:99999/", None),
    ("http://999.1.1.1/", None),
    ("/relative/without/base", None),
    ("", None),
    ("http://[", "http://h.test/"),
    ("https://", "http://h.test/"),
])
def test_rejects_unparsable_input(link, base):
    with pytest.raises(UrlRejected, match=r"^unparsable URL$") as err:
        canonicalize(link, base)
    assert isinstance(err.value, ValueError)


def test_rejects_results_over_the_length_limit():
    prefix = "http://h.test/"
    fits = prefix + "a" * (2083 - len(prefix))
    assert canonicalize(fits) == fits
    with pytest.raises(UrlRejected, match=r"^longer than 2083 characters$"):
        canonicalize(fits + "b")
    with pytest.raises(UrlRejected, match=r"^longer than 2083 characters$"):
        normalize(fits + "b")
    # the limit applies to the result, not the raw link
    assert canonicalize(prefix + "x/../" * 500 + "a") == prefix + "a"
    assert normalize(prefix + "abc", max_length=17) == prefix + "abc"
    with pytest.raises(UrlRejected, match=r"^longer than 16 characters$"):
        normalize(prefix + "abc", max_length=16)
    rules = CanonRules(max_length=20)
    with pytest.raises(UrlRejected, match=r"^longer than 20 characters$"):
        canonicalize(prefix + "a" * 7, rules=rules)
    # the fetch form is what must fit, even if the key would be shorter
    with pytest.raises(UrlRejected, match=r"^longer than 20 characters$"):
        canonicalize(prefix + "?utm_source=xxxxxxxx", rules=rules)


def test_invalid_base_rejects_every_link():
    for link in ("http://ok.test/", "/x", ""):
        with pytest.raises(UrlRejected, match=r"^invalid base URL$"):
            canonicalize(link, "not a url")
        with pytest.raises(UrlRejected, match=r"^invalid base URL$"):
            normalize(link, "http://[::1")
    canon = Canonicalizer()
    with pytest.raises(UrlRejected, match=r"^invalid base URL$"):
        canon.resolve("http://ok.test/", "::")
    assert canon.resolve_many(["http://ok.test/", "/x", "mailto:a@b"], "::") == [None] * 3
    assert canon.resolve_many(iter(["/a", "/b"]), "http://[bad") == [None, None]


def test_whitespace_and_control_characters_are_stripped_as_whatwg_does():
    assert both("  http://h.test/a  ") == ("http://h.test/a",) * 2
    assert both("\x00\x1f http://h.test/a\x01 ") == ("http://h.test/a",) * 2
    assert both("\thttp://h.\ntest/a\tb\r\n") == ("http://h.test/ab",) * 2
    assert canonicalize("\n /x\t ", "http://h.test/p") == "http://h.test/x"
    # inner spaces are not stripped but escaped
    assert canonicalize("http://h.test/a b") == "http://h.test/a%20b"


def test_empty_href_resolves_to_the_base_without_fragment():
    base = "http://h.test/d/p?b=2&a=1&utm_source=x#frag"
    assert normalize("", base) == "http://h.test/d/p?b=2&a=1&utm_source=x"
    assert canonicalize("", base) == "http://h.test/d/p?a=1&b=2"
    assert canonicalize("   ", base) == "http://h.test/d/p?a=1&b=2"


def test_ipv6_and_ipv4_hosts_are_canonical():
    assert both("http://[2001:DB8:0:0:0:0:0:1]:80/x") == ("http://[2001:db8::1]/x",) * 2
    assert canonicalize("https://[::FFFF:192.168.0.1]/") == "https://[::ffff:c0a8:1]/"
    assert canonicalize("http://0x7f.1/") == "http://127.0.0.1/"
    assert canonicalize("//[::1]:8080/a", "https://h.test/") == "https://[::1]:8080/a"


def test_userinfo_is_kept_in_both_forms():
    assert both("http://User:Pa%73s@H.test/") == ("http://User:Pass@h.test/",) * 2
    # a site-relative link keeps the page's userinfo, as browsers resolve it
    assert both("/x", "http://u:p@h.test/a") == ("http://u:p@h.test/x",) * 2
    assert canonicalize("http://u:p@h.test/") != canonicalize("http://h.test/")


def test_non_ascii_path_and_query_are_percent_encoded_as_utf8():
    assert both("http://h.test/café ü?q=ä") == ("http://h.test/caf%C3%A9%20%C3%BC?q=%C3%A4",) * 2
    assert canonicalize("städte/köln", "http://h.test/de/") == (
        "http://h.test/de/st%C3%A4dte/k%C3%B6ln")


def test_same_scheme_link_without_slashes_is_relative_to_the_page():
    assert canonicalize("http:foo", "http://h.test/a/b") == "http://h.test/a/foo"
    assert canonicalize("http:/foo", "http://h.test/a/b") == "http://h.test/foo"
    assert canonicalize("http:foo", "https://h.test/a/b") == "http://foo/"


def test_rejects_non_str_input_with_type_error():
    with pytest.raises(TypeError, match=r"^url must be a str, not bytes$"):
        canonicalize(b"http://h.test/")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^base must be a str or None, not bytes$"):
        normalize("/x", base=b"http://h.test/")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^rules must be CanonRules, not dict$"):
        canonicalize("http://h.test/", rules={"sort_query": True})  # type: ignore[arg-type]


# -- rules --------------------------------------------------------------------------------

def test_default_rules_and_tracking_params():
    assert CanonRules() == DEFAULT_RULES
    assert DEFAULT_RULES.sort_query is True
    assert DEFAULT_RULES.max_length == 2083
    assert DEFAULT_RULES.strip_params == DEFAULT_TRACKING_PARAMS
    assert set(DEFAULT_TRACKING_PARAMS) == {
        "utm_*", "gclid", "gclsrc", "dclid", "fbclid", "msclkid", "yclid", "mc_cid",
        "mc_eid", "_ga", "_gl", "igshid", "twclid", "ttclid", "li_fat_id", "wbraid",
        "gbraid", "_hsenc", "_hsmi", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id"}
    assert len(DEFAULT_TRACKING_PARAMS) == 23


def test_rules_are_frozen_hashable_values():
    a = CanonRules(strip_params=("x",))
    assert a == CanonRules(strip_params=("x",)) and hash(a) == hash(CanonRules(strip_params=("x",)))
    with pytest.raises(AttributeError, match="cannot assign to field 'sort_query'"):
        a.sort_query = False  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"strip_params": "utm_source"}, TypeError,
     "strip_params must be a tuple of parameter names, not str"),
    ({"strip_params": ["utm_source"]}, TypeError,
     "strip_params must be a tuple of parameter names, not list"),
    ({"strip_params": ("",)}, ValueError, "strip_params entries must be non-empty strings: ''"),
    ({"strip_params": ("a*b",)}, ValueError, "'*' is only allowed at the end of a name: 'a*b'"),
    ({"strip_params": (3,)}, ValueError, "strip_params entries must be non-empty strings: 3"),
    ({"max_length": 0}, ValueError, "max_length must be a positive integer, not 0"),
    ({"max_length": True}, ValueError, "max_length must be a positive integer, not True"),
    ({"max_length": 10.5}, ValueError, "max_length must be a positive integer, not 10.5"),
    ({"sort_query": "yes"}, TypeError, "sort_query must be a bool, not 'yes'"),
])
def test_rules_reject_bad_values(kwargs, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        CanonRules(**kwargs)


def test_normalize_rejects_bad_max_length():
    with pytest.raises(ValueError, match=r"^max_length must be a positive integer, not 0$"):
        normalize("http://h.test/", max_length=0)


# -- WHATWG conformance (web-platform-tests urltestdata.json) ------------------------------

def _wpt_cases() -> list[dict]:
    return [c for c in json.loads(WPT_DATA.read_text(encoding="utf-8")) if isinstance(c, dict)]


def _is_http(url: str | None) -> bool:
    if url is None:
        return False
    cleaned = url.strip("".join(map(chr, range(0x21)))).translate({9: None, 10: None, 13: None})
    return cleaned.lower().startswith(("http:", "https:"))


def _case_id(i: int, case: dict) -> str:
    text = f"{i}:{case['input']!r}" + (f"@{case['base']!r}" if case["base"] else "")
    return text if len(text) <= 70 else text[:67] + "..."


_WPT = list(enumerate(_wpt_cases()))
WPT_HTTP_OK = [pytest.param(c, id=_case_id(i, c)) for i, c in _WPT
               if not c.get("failure") and c["protocol"] in ("http:", "https:")]
WPT_HTTP_FAIL = [pytest.param(c, id=_case_id(i, c)) for i, c in _WPT
                 if c.get("failure") and (_is_http(c["input"]) or _is_http(c["base"]))]


def test_wpt_data_is_the_vendored_copy():
    import hashlib
    assert hashlib.sha256(WPT_DATA.read_bytes()).hexdigest() == WPT_SHA256
    assert len(WPT_HTTP_OK) == 247
    assert len(WPT_HTTP_FAIL) == 199


@pytest.mark.parametrize("case", WPT_HTTP_OK)
def test_wpt_http_case_resolves_like_the_standard(case):
    assert canonicalize(case["input"], case["base"]) == canonicalize(case["href"])
    fetch = normalize(case["input"], case["base"])
    assert fetch == normalize(case["href"])
    if "%" not in case["href"]:  # only our escape normalization may differ from the standard
        assert fetch == case["href"].partition("#")[0]


@pytest.mark.parametrize("case", WPT_HTTP_FAIL)
def test_wpt_failure_case_is_rejected(case):
    with pytest.raises(UrlRejected, match=r"^unparsable URL$"):
        canonicalize(case["input"], case["base"])


def test_wpt_cases_agree_through_the_cache():
    canon = Canonicalizer(cache_size=64)
    for param in WPT_HTTP_OK:
        case = param.values[0]
        assert canon.resolve(case["input"], case["base"]) == (
            normalize(case["input"], case["base"]), canonicalize(case["input"], case["base"]))
    for param in WPT_HTTP_FAIL:
        case = param.values[0]
        assert canon.resolve_many([case["input"]], case["base"]) == [None]


# -- Canonicalizer (the cached hot path) --------------------------------------------------

def test_resolve_returns_fetch_url_and_key():
    canon = Canonicalizer()
    assert canon.resolve("../b?utm_source=x&z=1&a=2#f", "https://H.test/d/e/p") == (
        "https://h.test/d/b?utm_source=x&z=1&a=2", "https://h.test/d/b?a=2&z=1")
    with pytest.raises(UrlRejected, match=r"^unsupported scheme 'mailto'$"):
        canon.resolve("mailto:x@h.test", "https://h.test/")
    with pytest.raises(UrlRejected, match=r"^unsupported scheme 'mailto'$"):
        canon.resolve("mailto:x@h.test", "https://h.test/")  # again, from the cache
    with pytest.raises(UrlRejected, match=r"^unparsable URL$"):
        canon.resolve("/x")


def test_canonicalizer_applies_its_rules():
    canon = Canonicalizer(CanonRules(sort_query=False, strip_params=("sid",)))
    assert canon.resolve("http://h.test/?sid=1&b=1&a=1&utm_source=x") == (
        "http://h.test/?sid=1&b=1&a=1&utm_source=x", "http://h.test/?b=1&a=1&utm_source=x")
    assert canon.rules == CanonRules(sort_query=False, strip_params=("sid",))


def test_resolve_many_returns_none_for_bad_links_and_never_raises():
    canon = Canonicalizer()
    links = ["/ok", None, b"/bytes", 5, ["/x"], "mailto:a@b", "http://[", "javascript:void(0)",
             "/a\udcff", " ", "x" * 5000 + ":", "https://other.test/"]
    for _ in range(2):  # cold, then from the cache
        got = canon.resolve_many(links, "http://h.test/d/p")  # type: ignore[arg-type]
        assert got == [("http://h.test/ok",) * 2, None, None, None, None, None, None, None,
                       None, ("http://h.test/d/p",) * 2, None, ("https://other.test/",) * 2]
    with pytest.raises(UrlRejected, match=r"^unparsable URL$"):  # not UTF-8 encodable
        canon.resolve("/a\udcff", "http://h.test/d/p")


def test_resolve_many_refuses_a_single_string():
    with pytest.raises(TypeError, match=r"^links must be an iterable of links, not one str$"):
        Canonicalizer().resolve_many("http://h.test/")


def test_resolve_many_accepts_any_iterable_and_no_base():
    canon = Canonicalizer()
    got = canon.resolve_many(iter(["http://A.test/x#f", "/relative", "mailto:x@y"]))
    assert got == [("http://a.test/x",) * 2, None, None]


def test_resolve_many_with_a_non_http_base():
    canon = Canonicalizer()
    assert canon.resolve_many(["http://a.test/", "x", "//h.test/y"], "about:blank") == [
        ("http://a.test/",) * 2, None, None]
    assert canon.resolve_many(["x"], "file:///dir/page") == [None]


def test_repeated_links_across_pages_hit_the_cache(python_path):
    canon = Canonicalizer()
    nav = ["/", "/about", "contact.html", "https://cdn.test/x.js", "#top", "javascript:void(0)"]
    first = canon.resolve_many([*nav, "story1.html"], "http://h.test/news/1.html")
    assert canon.cache_info() == {"hits": 0, "misses": 7, "size": 7,
                                 "maxsize": 100_000, "compiled": 0}
    second = canon.resolve_many([*nav, "story2.html"], "http://h.test/news/2.html")
    # "#top" depends on the whole page URL: the only nav link that misses
    assert canon.cache_info()["hits"] == 5
    assert canon.cache_info()["misses"] == 9
    assert first[:4] == second[:4]
    assert first[4] == ("http://h.test/news/1.html",) * 2
    assert second[4] == ("http://h.test/news/2.html",) * 2
    assert first[5] is None and second[5] is None


RESOLUTION_CONTEXT_CASES = [
    # the same raw link on pages that differ in exactly the part it depends on
    ("x", ["http://h.test/a/p", "http://h.test/b/p", "http://g.test/a/p", "https://h.test/a/p"]),
    ("../x", ["http://h.test/a/b/p", "http://h.test/a/c/p", "http://h.test/p"]),
    ("/x", ["http://h.test/a", "http://g.test/a", "http://u:p@h.test/a", "http://h.test:8/a",
            "https://h.test/a"]),
    ("\\x", ["http://h.test/a", "http://g.test/a"]),
    ("//c.test/x", ["http://h.test/a", "https://h.test/a"]),
    ("\\\\c.test/x", ["http://h.test/a", "https://h.test/a"]),
    ("/\\c.test/x", ["http://h.test/a", "https://h.test/a"]),
    ("?q=1", ["http://h.test/a/p", "http://h.test/a/r", "http://h.test/a/p?old"]),
    ("", ["http://h.test/a/p?x=1", "http://h.test/a/p?x=2", "http://h.test/a/p"]),
    ("#f", ["http://h.test/a/p?x=1", "http://h.test/a/p?x=2"]),
    ("#", ["http://h.test/a/p?x=1", "http://h.test/a/p#old", "http://h.test/b/p"]),
    (" #\tf g", ["http://h.test/a/p?x=1", "http://h.test/a/p?x=2"]),
    ("http:x", ["http://h.test/a/p", "http://h.test/b/p", "https://h.test/a/p"]),
    ("HTTP:?q", ["http://h.test/a/p", "http://h.test/a/r"]),
    ("http:/\\c.test/x", ["http://h.test/a", "https://h.test/a"]),
    ("ht\ttp:?q", ["http://h.test/a/p", "http://h.test/a/r"]),
    ("ht\ntp:x", ["http://h.test/a/p", "http://h.test/b/p"]),
    ("/\n/c.test/x", ["http://h.test/a", "https://h.test/a"]),
    (" ?q", ["http://h.test/a/p", "http://h.test/a/r"]),
    ("\t", ["http://h.test/a/p?1", "http://h.test/a/p?2"]),
    ("a:b", ["http://h.test/a/p", "http://h.test/b/p"]),
    ("./a:b", ["http://h.test/a/p", "http://h.test/b/p"]),
    ("1a:b", ["http://h.test/a/p", "http://h.test/b/p"]),
]


@pytest.mark.parametrize("link, pages", RESOLUTION_CONTEXT_CASES,
                         ids=[repr(c[0]) for c in RESOLUTION_CONTEXT_CASES])
def test_cache_never_mixes_resolution_contexts(link, pages, python_path):
    canon = Canonicalizer()
    for _ in range(2):  # the second round is served from the cache
        for page in pages:
            want = _uncached(link, page)
            assert canon.resolve_many([link], page) == [want], page
    assert canon.cache_info()["hits"] >= len(pages)


def test_fragment_only_links_of_a_page_share_one_entry(python_path):
    canon = Canonicalizer()
    page = "http://h.test/a/p?x=1#here"
    got = canon.resolve_many(["#top", "#", "", "#c3", " #x"], page)
    assert got == [("http://h.test/a/p?x=1",) * 2] * 5
    assert canon.cache_info()["misses"] == 1


def test_cache_shares_entries_where_the_context_allows(python_path):
    canon = Canonicalizer()
    canon.resolve_many(["/x", "y", "//c.test/z", "https://a.test/"], "http://h.test/d/1")
    canon.resolve_many(["/x", "y", "//c.test/z", "https://a.test/"], "http://h.test/d/2?q")
    canon.resolve_many(["/x", "//c.test/z", "https://a.test/"], "http://h.test/e/3")
    canon.resolve_many(["//c.test/z", "https://a.test/"], "http://g.test/")
    canon.resolve_many(["https://a.test/"], "https://g.test/")
    assert canon.cache_info()["misses"] == 4
    assert canon.cache_info()["hits"] == 4 + 3 + 2 + 1
    # backslashes act as slashes in http(s): these are scheme-relative too
    canon.resolve_many(["\\\\c.test/z", "/\\c.test/z"], "http://h.test/")
    canon.resolve_many(["\\\\c.test/z", "/\\c.test/z"], "http://g.test/")
    assert canon.cache_info()["misses"] == 6


def test_cache_is_bounded(python_path):
    canon = Canonicalizer(cache_size=10)
    for i in range(100):
        got = canon.resolve_many([f"/p{i}", f"q{i}"], "http://h.test/d/")
        assert got == [(f"http://h.test/p{i}",) * 2, (f"http://h.test/d/q{i}",) * 2]
        assert canon.cache_info()["size"] <= 10
    assert canon.cache_info()["misses"] == 200


def test_cache_keeps_hot_entries_while_cold_ones_churn(python_path):
    canon = Canonicalizer(cache_size=4)
    for i in range(50):
        canon.resolve_many(["/hot", f"/cold{i}"], "http://h.test/")
    # "/hot" missed once; every cold link missed once
    assert canon.cache_info()["misses"] == 51
    assert canon.cache_info()["hits"] == 49


def test_very_long_links_are_resolved_but_not_cached(python_path):
    canon = Canonicalizer()
    long_link = "/" + "a" * 5000
    assert canon.resolve_many([long_link], "http://h.test/") == [None]  # over 2083
    assert canon.resolve_many([long_link[:2000]], "http://h.test/") == [
        ("http://h.test" + long_link[:2000],) * 2]
    assert canon.cache_info()["size"] == 1


def test_cache_size_zero_disables_caching(python_path):
    canon = Canonicalizer(cache_size=0)
    assert canon.resolve_many(["/a", "/a", "mailto:x"], "http://h.test/") == [
        ("http://h.test/a",) * 2, ("http://h.test/a",) * 2, None]
    assert canon.cache_info() == {"hits": 0, "misses": 3, "size": 0,
                                  "maxsize": 0, "compiled": 0}


def test_cache_clear(python_path):
    canon = Canonicalizer()
    canon.resolve_many(["/a"], "http://h.test/")
    canon.cache_clear()
    assert canon.cache_info()["size"] == 0
    canon.resolve_many(["/a"], "http://h.test/")
    assert canon.cache_info()["misses"] == 2


@pytest.mark.parametrize("kwargs", [{"cache_size": -1}, {"cache_size": 1.5},
                                    {"cache_size": True}])
def test_canonicalizer_rejects_bad_cache_size(kwargs):
    with pytest.raises(ValueError, match=r"^cache_size must be an integer >= 0, not "):
        Canonicalizer(**kwargs)


def test_canonicalizer_rejects_bad_rules():
    with pytest.raises(TypeError, match=r"^rules must be CanonRules, not dict$"):
        Canonicalizer({"sort_query": False})  # type: ignore[arg-type]


# -- properties ----------------------------------------------------------------------------

def _uncached(link: str, base: str | None) -> tuple[str, str] | None:
    try:
        return normalize(link, base), canonicalize(link, base)
    except UrlRejected:
        return None


_LABEL = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,6}[a-zA-Z0-9])?", fullmatch=True)
_HOST = st.one_of(
    st.lists(_LABEL, min_size=1, max_size=3).map(".".join),
    st.sampled_from(["Bücher.example", "例え.テスト", "ПРИМЕР.рф", "straße.de",
                     "ＥＸＡＭＰＬＥ.com", "xn--bcher-kva.example", "127.0.0.1", "0x7f.1", "[::1]",
                     "[2001:DB8::0:1]", "[::ffff:10.0.0.1]", "h.test.", "%41.test"]),
)
_PORT = st.sampled_from(["", ":", ":80", ":443", ":8080", ":0443"])
_USERINFO = st.sampled_from(["", "user@", "User:Pw@", "u%40x:p%3As@", "a%7e:@"])
_PIECES = ["a", "Z", "9", "-", ".", "..", "_", "~", "!", "$", "'", "(", "*", "+", ",", ";", "=",
           ":", "@", "%2e", "%2E", "%2e%2e", "%41", "%7e", "%7E", "%2f", "%3a", "%zz", "%",
           "%%", "%c3%a9", "é", "ü", "日本", " ", "\t", "\\", "|", "`", "{", "^", "\"", "<"]
_SEGMENT = st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)
_PATH = st.lists(_SEGMENT, max_size=5).map(lambda s: "/" + "/".join(s))
_NAME = st.sampled_from(["a", "b", "B", "id", "q", "utm_source", "UTM_Medium", "utm_", "gclid",
                         "FBCLID", "_ga", "ref", "%41", "a%5Fb", "utm%5Fcampaign", "", "é"])
_VALUE = st.lists(st.sampled_from([*_PIECES, "=", "?", "/", "#x"]), max_size=3).map("".join)
_PARAM = st.tuples(_NAME, st.sampled_from(["", "="]), _VALUE).map(
    lambda t: t[0] + (t[1] + t[2] if t[1] else ""))
_QUERY = st.one_of(st.just(""), st.just("?"),
                   st.lists(_PARAM, min_size=1, max_size=5).map(lambda p: "?" + "&".join(p)))
_FRAGMENT = st.one_of(st.just(""), _VALUE.map(lambda v: "#" + v))
_SCHEME = st.sampled_from(["http", "https", "HTTP", "hTTps"])
ABSOLUTE = st.builds(lambda s, u, h, p, pa, q, f: f"{s}://{u}{h}{p}{pa}{q}{f}",
                     _SCHEME, _USERINFO, _HOST, _PORT, _PATH, _QUERY, _FRAGMENT)
RELATIVE = st.one_of(
    st.builds(lambda pa, q, f: pa[1:] + q + f, _PATH, _QUERY, _FRAGMENT),   # path-relative
    st.builds(lambda pa, q, f: "../" + pa[1:] + q + f, _PATH, _QUERY, _FRAGMENT),
    st.builds(lambda pa, q, f: pa + q + f, _PATH, _QUERY, _FRAGMENT),       # site-relative
    st.builds(lambda h, pa: "//" + h + pa, _HOST, _PATH),                  # scheme-relative
    st.builds(lambda q, f: q + f, _QUERY, _FRAGMENT),                      # ?q, #f, ""
    st.builds(lambda s, pa: s + ":" + pa[1:], _SCHEME, _PATH),             # "http:x"
    st.sampled_from(["mailto:a@b.test", "javascript:void(0)", "data:,x", " /x ", "\t?q",
                     "\\\\c.test/x", "h\ttp:?q"]),
)
LINK = st.one_of(ABSOLUTE, RELATIVE)
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(ABSOLUTE)
def test_property_canonicalize_and_normalize_are_idempotent(url):
    try:
        fetch, key = normalize(url), canonicalize(url)
    except UrlRejected:
        return
    assert normalize(fetch) == fetch
    assert canonicalize(key) == key
    assert canonicalize(fetch) == key


@PROPERTY
@given(ABSOLUTE, RELATIVE)
def test_property_resolved_links_are_idempotent_and_well_formed(base, link):
    try:
        fetch, key = normalize(link, base), canonicalize(link, base)
    except UrlRejected:
        return
    assert normalize(fetch) == fetch and canonicalize(key) == key
    assert fetch.startswith(("http://", "https://")) and "#" not in fetch
    assert len(key) <= len(fetch) <= 2083
    assert key.partition("?")[0] == fetch.partition("?")[0]
    query = key.partition("?")[2]
    names = [p.partition("=")[0] for p in query.split("&")] if query else []
    assert names == sorted(names)
    assert not any(n.lower().startswith("utm_") or n.lower() in ("gclid", "fbclid", "_ga")
                   for n in names)


@PROPERTY
@given(st.text(max_size=40))
def test_property_arbitrary_text_is_resolved_or_rejected_cleanly(text):
    base = "http://h.test/a/b?c#d"
    try:
        fetch, key = normalize(text, base), canonicalize(text, base)
    except UrlRejected:
        return
    assert normalize(fetch) == fetch
    assert canonicalize(key) == key


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ABSOLUTE, min_size=1, max_size=4), st.lists(LINK, min_size=1, max_size=8),
       st.sampled_from([0, 6, 1000]))
def test_property_cached_resolution_equals_uncached(bases, links, cache_size):
    canon = Canonicalizer(cache_size=cache_size)
    for _ in range(2):
        for base in [*bases, None]:  # an invalid base makes _uncached reject every link
            assert canon.resolve_many(links, base) == [_uncached(link, base) for link in links]


# -- per-page fast path: page dedupe, fingerprints, contexts that must not collide -------

def test_same_raw_link_under_different_bases_does_not_collide():
    canon = Canonicalizer()
    pages = ["http://h.test/a/p", "http://h.test/b/p", "http://g.test/a/p", "https://h.test/a/p",
             "http://h.test:8080/a/p", "http://u@h.test/a/p"]
    links = ["x.html", "/x.html", "?q=1", "", "#f", "../x.html", "//c.test/x"]
    for _ in range(2):  # cold, then from the cache
        for page in pages:
            assert canon.resolve_many(links, page) == [_uncached(link, page) for link in links]
    dirs = {canon.resolve_many(["x.html"], p)[0][0] for p in pages}
    assert len(dirs) == len(pages)


def test_base_href_differences_resolve_like_the_standard():
    # the page URL vs a <base href> that differs in directory, host, scheme or only case
    canon = Canonicalizer()
    bases = ["http://h.test/a/b/page.html", "http://h.test/a/b/", "http://h.test/a/b",
             "HTTP://H.TEST/a/b/", "http://h.test/a/b/?x=1#frag", "https://h.test/a/b/",
             "http://h.test/A/b/", "http://h.test/a/b/./c/../"]
    for base in bases:
        got = canon.resolve_many(["c.html", "./c.html", "/c.html", "?q"], base)
        assert got == [_uncached(link, base) for link in ["c.html", "./c.html", "/c.html", "?q"]]
    # "HTTP://H.TEST/a/b/" and "http://h.test/a/b/" are one context: served from the cache
    assert canon.resolve_many(["c.html"], "http://h.test/a/b/") == [
        ("http://h.test/a/b/c.html",) * 2]


def test_query_and_fragment_variants_of_one_link():
    canon = Canonicalizer()
    page = "http://h.test/d/p.html?page=3"
    links = ["s.html", "s.html#c", "s.html?", "s.html?b=2&a=1", "s.html?a=1&b=2#x",
             "s.html?utm_source=x&a=1&b=2", "s.html?A=1", "?page=4", "?page=3#top", "#top"]
    got = canon.resolve_many(links, page)
    assert got == [_uncached(link, page) for link in links]
    assert [k for _, k in got] == [
        "http://h.test/d/s.html", "http://h.test/d/s.html", "http://h.test/d/s.html",
        "http://h.test/d/s.html?a=1&b=2", "http://h.test/d/s.html?a=1&b=2",
        "http://h.test/d/s.html?a=1&b=2", "http://h.test/d/s.html?A=1",
        "http://h.test/d/p.html?page=4", "http://h.test/d/p.html?page=3",
        "http://h.test/d/p.html?page=3"]
    assert got[3][0] == "http://h.test/d/s.html?b=2&a=1"  # the fetch form keeps the order


def test_cache_eviction_bound_holds_under_many_contexts():
    canon = Canonicalizer(cache_size=50)
    for i in range(500):
        page = f"http://h{i % 37}.test/d{i % 11}/p{i}"
        links = ["/", "x.html", f"y{i}.html", "#top", "?q", "https://c.test/"]
        assert canon.resolve_many(links, page) == [_uncached(link, page) for link in links]
        assert canon.cache_info()["size"] <= 50


@pytest.mark.parametrize("seed", [-1, 2**32, 1.0, True, None])
def test_canonicalizer_rejects_bad_seed(seed):
    message = f"seed must be an integer in [0, 2**32), not {seed}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Canonicalizer(seed=seed)


# Relative links made of the characters the parser-free path accepts and of the
# ones it must leave to the parser (dot segments, '%', ':', '\\', quotes, spaces).
_REL_CHARS = st.sampled_from([*list("ab.-_~/?#=&;:@!$'()*+,%2eE \\\"<>`{}|^é"), "..", "./"])
_REL_LINK = st.lists(_REL_CHARS, max_size=12).map("".join)
_PAGES = st.sampled_from(["http://h.test/", "http://h.test/d/e/p.html?x=1#f", "https://h.test/d/",
                          "http://u:p@h.test:81/d/p", "http://h.test/d%2e/p", "http://h.test/d/"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_PAGES, st.lists(_REL_LINK, min_size=1, max_size=6), st.sampled_from([0, 4, 1000]))
def test_property_cached_random_relative_links_equal_uncached(page, links, cache_size):
    canon = Canonicalizer(cache_size=cache_size)
    want = [_uncached(link, page) for link in links]
    for _ in range(2):
        assert canon.resolve_many(links, page) == want


def test_parser_free_join_takes_only_links_it_can_prove():
    from dedup.url.urlform import simple_join
    d = "http://h.test/d/"
    assert simple_join("story-1.html", d) == "http://h.test/d/story-1.html"
    assert simple_join("a//b;c=1?x=1:2/?#f g", d) == "http://h.test/d/a//b;c=1?x=1:2/?"
    assert simple_join("/s/x.html?utm_source=a", "http://h.test") == "http://h.test/s/x.html?utm_source=a"
    assert simple_join("...x/.y", d) == "http://h.test/d/...x/.y"
    for link in ["./x", "a/../b", "a/.", "..", "%2e%2e/x", "a:b", "a\\b", "a b", "é", "a?'",
                 "a\tb", "x?a b", "a\"b", "x<y"]:
        assert simple_join(link, d) is None, link


def test_direct_ada_join_agrees_with_ada_url_on_the_wpt_data():
    from ada_url import join_url, parse_url

    from dedup.url.urlform import join
    for _, case in _WPT:
        base, inp = case["base"], case["input"]
        try:
            want = join_url(base, inp) if base else parse_url(inp, ("href",))["href"]
        except ValueError:
            want = None
        assert join(inp, base.encode() if base else None) == want, case


def test_links_of_one_page_one_call_each_parse_its_base_once(monkeypatch):
    """``UrlSeen.add`` resolves a page's links one call each with the same base:
    the base is parsed once, and a change of base (or an invalid one) is seen."""
    import dedup.url.canonical as canonical_mod

    calls: list[str] = []
    real = canonical_mod.page_contexts

    def counting(base):
        calls.append(base)
        return real(base)

    page, other, bad = "https://a.example/d/p?q=1", "http://b.example/x/", "http://[::1"
    links = ["../up", "?z=2", "/root", "mailto:x@y", "s"]
    want, want_other = Canonicalizer().resolve_many(links, page), Canonicalizer().resolve_many(
        ["s"], other)
    monkeypatch.setattr(canonical_mod, "page_contexts", counting)
    c = Canonicalizer()
    got = [c.resolve_many((link,), page)[0] for link in links]
    assert calls == [page]
    assert got == want
    assert c.resolve_many(["s"], other) == want_other
    assert c.resolve_many(["s"], bad) == c.resolve_many(["s"], bad) == [None]
    assert c.resolve_many(["s"], page) == [got[-1]]
    assert calls == [page, other, bad, page]
