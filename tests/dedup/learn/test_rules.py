"""URL rewrite rules: what a pair of duplicate URLs proposes, and what each rule rewrites."""

from __future__ import annotations

import pytest

from dedup.learn.rules import (
    ORDER,
    Rule,
    apply_rules,
    parse_key,
    pattern_of,
    propose,
    rule_from_spec,
    segment_class,
    shape_of,
)

H = "http://h.test"


def _p(path: str):
    parts = parse_key(H + path)
    assert parts is not None
    return parts


def _proposed(a: str, b: str) -> list[Rule]:
    return propose(_p(a), _p(b))


@pytest.mark.parametrize(("a", "b", "want"), [
    ("/p?sid=1", "/p?sid=2", [Rule("drop_params", names=("sid",))]),
    ("/p", "/p?ref=nav", [Rule("drop_params", names=("ref",)),
                          Rule("default_param", names=("ref",), value="nav")]),
    ("/list", "/list?page=1", [Rule("drop_params", names=("page",)),
                               Rule("default_param", names=("page",), value="1")]),
    # two values that differ are dropped together; one only one side has is not
    ("/p?a=1&sid=1", "/p?a=2&sid=2", [Rule("drop_params", names=("a", "sid"))]),
    ("/p?sid=1", "/p?ref=x&sid=2", [Rule("drop_params", names=("sid",))]),
    ("/p", "/p?ref=x&sort=y", []),
    ("/dir/", "/dir/index.html", [Rule("strip_suffix", suffix="index.html")]),
    ("/a/b/", "/a/b", [Rule("trailing_slash")]),
    ("/Docs/Page", "/docs/page", [Rule("lower_case")]),
    ("/item/7/blue-widget", "/item/7/red-thing",
     [Rule("ignore_segment", head=("item", "*"), pos=2, shape="slug"),
      Rule("ignore_segment", head=("*", "*"), pos=2, shape="slug")]),
    ("/s/0ddb5e66/page", "/s/4a7f0c21/page",
     [Rule("ignore_segment", head=("s",), pos=1, shape="hex")]),
    ("/a;jsessionid=1/b", "/a;jsessionid=2/b", [Rule("path_param", names=("jsessionid",))]),
    ("/print/news/7/x", "/news/7/x", [Rule("drop_segment", suffix="print", pos=0)]),
    # a view prefix under a head: the literal segment only, not "any word there"
    ("/s/0ddb5e66/print/a/b", "/s/0ddb5e66/a/b",
     [Rule("drop_segment", suffix="print", head=("s", "*"), pos=2)]),
    ("/help/install/configure/", "/help/configure/",
     [Rule("drop_segment", suffix="install", head=("help",), pos=1),
      Rule("drop_segment", head=("help",), pos=1, shape="word")]),
    # two ways of differing at once propose nothing; nor do other hosts or equal keys
    ("/a/b?sid=1", "/a/c?sid=2", []),
    ("/item/7/x", "/item/8/y", []),
    # a slug or none: the last segment goes; an index file of a directory is stripped
    ("/item/7/blue-widget", "/item/7",
     [Rule("ignore_segment", head=("item", "*"), pos=2, shape="slug"),
      Rule("ignore_segment", head=("*", "*"), pos=2, shape="slug")]),
    ("/docs/", "/docs/guide", [Rule("strip_suffix", suffix="guide")]),
    ("/p", "/p", []),
])
def test_a_pair_of_duplicate_urls_proposes_the_rule_that_makes_them_one(a, b, want):
    got = _proposed(a, b)
    assert got == want
    assert {r.kind for r in _proposed(b, a)} == {r.kind for r in want}
    for rule in got:
        if (a, b) not in STEPWISE:  # it makes the pair one key
            assert rule.apply(_p(a)).key() == rule.apply(_p(b)).key()
        assert rule_from_spec(rule.spec()) == rule
        assert rule.describe()


# sid differs and ref is on one side only: sid is proposed, ref is learned from pairs
# where it is the one difference (once sid is a rule, this pair's rewritten keys are)
STEPWISE = {("/p?sid=1", "/p?ref=x&sid=2")}


@pytest.mark.parametrize(("rule", "path", "want"), [
    (Rule("drop_params", names=("sid", "ref")), "/p?a=1&ref=x&sid=2", "/p?a=1"),
    (Rule("default_param", names=("page",), value="1"), "/l?page=1", "/l"),
    (Rule("default_param", names=("page",), value="1"), "/l?page=2", "/l?page=2"),
    (Rule("trailing_slash"), "/", "/"),
    (Rule("trailing_slash"), "/a//", "/a"),
    (Rule("strip_suffix", suffix="index.html"), "/index.html", "/"),
    (Rule("strip_suffix", suffix="index.html"), "/myindex.html", "/myindex.html"),
    (Rule("lower_case"), "/A/B?Q=X", "/a/b?Q=X"),
    (Rule("ignore_segment", head=("item", "*"), pos=2, shape="slug"),
     "/item/9/any-slug-here", "/item/9"),  # a last segment goes
    (Rule("ignore_segment", head=("s",), pos=1, shape="hex"),
     "/s/0ddb5e66/page", "/s/*/page"),  # one inside stays, as "*"
    (Rule("ignore_segment", head=("item", "*"), pos=2, shape="slug"),
     "/item/9/reviews", "/item/9/reviews"),  # a word, not a slug
    (Rule("ignore_segment", head=("item", "*"), pos=2, shape="slug"),
     "/guide/9/any-slug", "/guide/9/any-slug"),  # another head
    (Rule("path_param", names=("jsessionid",)), "/a;jsessionid=X;v=2/b", "/a;v=2/b"),
    (Rule("drop_segment", suffix="print", pos=0), "/print/a", "/a"),
    (Rule("drop_segment", suffix="print", pos=0), "/print/", "/print/"),  # not the root
    (Rule("drop_segment", head=("help",), pos=1, shape="word"), "/help/a/b/c/", "/help/c/"),
    (Rule("drop_segment", head=("help",), pos=1, shape="word"), "/help/a/", "/help/a/"),
])
def test_each_rule_rewrites_what_it_covers_and_nothing_else(rule, path, want):
    parts = _p(path)
    out = rule.apply(parts)
    assert out.key() == H + want
    assert (out is parts) == (want == path or parts.key() == out.key())


def test_rules_compose_in_a_fixed_order():
    rules = sorted([(1, Rule("trailing_slash")), (2, Rule("drop_params", names=("sid",))),
                    (3, Rule("strip_suffix", suffix="index.html"))],
                   key=lambda r: (r[1].rank(), r[0]))
    assert [r.kind for _, r in rules] == ["strip_suffix", "trailing_slash", "drop_params"]
    out, applied = apply_rules(rules, _p("/dir/index.html?sid=4"))
    assert out.key() == H + "/dir" and applied == (3, 1, 2)
    out, applied = apply_rules(rules, _p("/other"))
    assert out.key() == H + "/other" and applied == ()
    assert len(ORDER) == len(set(ORDER))


def test_keys_patterns_and_shapes():
    assert parse_key("~http://h/x") is None
    assert parse_key("http://h") == parse_key("http://h/")
    assert _p("/a?x&y=").params == (("x", None), ("y", ""))
    assert _p("/a?x&y=").key() == H + "/a?x&y="
    assert [segment_class(s) for s in ("123", "0ddb5e66", "deadbeef", "a1b2c3", "blue-sky",
                                       "News", "a.b")] == \
        ["num", "hex", "hex", "token", "slug", "word", "other"]
    assert pattern_of(H + "/calendar/2024/05") == "/calendar/*/*"
    assert pattern_of(H + "/shop/shirts/?size=m&color=red") == "/shop/*/?color&size"
    assert pattern_of(H + "/0ddb5e66/page") == "/*/*"
    # segments a rule ignored (a session id in the path, a slug) are no part of it: a
    # calendar under /s/SESSION/ is the calendar, not every page four segments deep
    assert pattern_of(H + "/s/*/calendar/2024/05") == "/calendar/*/*"
    # and the same before the rule: a budget's pattern does not move when it is learned
    assert pattern_of(H + "/s/0ddb5e66/calendar/2024/05") == "/calendar/*/*"
    assert pattern_of(H + "/s/*/news/7/*?print=1") == "/news/*?print"
    assert pattern_of(H + "/s/*/") == "/"
    # an empty segment, or one of path parameters only, is a "/" (a trailing slash too)
    assert [pattern_of(H + p) for p in ("", "/", "/a", "/a/", "/a/b/c", "/a/b/c/", "/a//b/",
                                         "/x//", "/a;s=1/b/", "/a/b;s=1", "/a/;s/c",
                                         "/a/*/b/", "/7/b?y&x=1")] == \
        ["/", "/", "/a", "/a/", "/a/*/*", "/a/*/*/", "/a//*/", "/x//", "/a/*/", "/a/*",
         "/a//*", "/b/", "/*/*?x&y"]
    assert shape_of(H + "/news/1017/some-slug") == "/news/<num>/<slug>"
    assert shape_of(H + "/docs/") == "/docs/"
    with pytest.raises(ValueError, match="kind"):
        rule_from_spec({"kind": "nope"})


def test_a_pair_that_differs_in_several_ways_is_cut_into_its_differences():
    from dedup.learn.rules import decompose

    ref = Rule("drop_params", names=("ref",))
    assert decompose(_p("/Shop/Hats/?ref=list"), _p("/shop/hats")) == [
        [ref], [Rule("lower_case")], [Rule("trailing_slash")]]
    assert decompose(_p("/news/7/some-slug?ref=a"), _p("/news/7?ref=b")) == [
        [ref], [Rule("ignore_segment", head=("news", "*"), pos=2, shape="slug"),
                Rule("ignore_segment", head=("*", "*"), pos=2, shape="slug")]]
    # one difference is propose's; one no rule explains makes the whole pair nothing
    assert decompose(_p("/a?ref=x"), _p("/a")) == []
    assert decompose(_p("/a/b?ref=x"), _p("/c/d/e")) == []
    # the same case twice is no case difference; another host, no pair
    assert decompose(_p("/Wiki/a?x=1&y=2"), _p("/Wiki/a")) == [
        [Rule("drop_params", names=("x",))], [Rule("drop_params", names=("y",))]]
    assert decompose(_p("/a?x=1&y=2"), parse_key("http://other.test/a")) == []
