"""filter_new_pages answers like filter_new called page by page, through the whole
stack (a tiny index buffer, so flushes, merges and forgotten keys are crossed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import UrlSeen
from dedup.url.fingerprint import fingerprint

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

BASES = ["http://a.test/x/p.html", "https://B.test/", "http://a.test/y/", "not a url", None]
LINKS = ["q", "../q", "/q?utm_source=z&b=1", "/q?b=1", "#top", "http://a.test/x/q",
         "mailto:me@x", "//b.test/", "r%7e", "./x/q", ""] + [f"/n{i}" for i in range(12)]
PAGE = st.tuples(st.sampled_from(BASES), st.lists(st.sampled_from(LINKS), max_size=8))
STEP = st.one_of(st.tuples(st.just("pages"), st.lists(PAGE, max_size=6)),
                 st.tuples(st.just("forget"), st.lists(st.sampled_from(LINKS[12:]), max_size=3)))


def _open(d: Path) -> UrlSeen:
    return UrlSeen(d, capacity=16, shards=2, crawl_id="pages", index_buffer=4)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, max_size=12))
def test_batch_answers_like_page_by_page(tmp_path_factory: pytest.TempPathFactory,
                                         steps: list) -> None:
    root = tmp_path_factory.mktemp("pages")
    with _open(root / "one") as one, _open(root / "many") as many:
        for op, arg in steps:
            if op == "forget":
                urls = [f"http://a.test{u}" for u in arg]
                assert one.forget(urls) == many.forget(urls)
                continue
            want = [one.filter_new(links, base_url=base) for base, links in arg]
            assert many.filter_new_pages(arg) == want
        for key in ("links", "new", "repeats", "rejected"):
            assert many.counters[key] == one.counters[key], key
        for base, links in [(b, LINKS) for b in BASES]:  # the same state afterwards
            assert many.filter_new(links, base_url=base) == one.filter_new(links, base_url=base)


def test_batch_of_nothing_and_read_only(tmp_path: Path) -> None:
    with _open(tmp_path / "d") as seen:
        assert seen.filter_new_pages([]) == []
        assert seen.filter_new_pages([("http://a.test/", [])]) == [[]]
        assert seen.filter_new_pages([("http://a.test/", ["/a"]), (None, ["http://a.test/a"])]) \
            == [["http://a.test/a"], []]
    with UrlSeen(tmp_path / "d", readonly=True) as ro:
        assert ro.filter_new_pages([("http://a.test/", ["/a"])]) == [[]]
        with pytest.raises(PermissionError):
            ro.filter_new_pages([("http://a.test/", ["/b"])])


PAIR = st.sampled_from([*LINKS[11:], "/q", "/r"]).map(lambda p: (f"http://a.test{p}",
                                                                   f"http://a.test{p}"))
DEPTH_PAGE = st.tuples(st.lists(PAIR, max_size=8), st.integers(0, 3))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.lists(DEPTH_PAGE, max_size=6), max_size=10))
def test_admitting_pages_at_once_admits_what_page_by_page_does(
        tmp_path_factory: pytest.TempPathFactory, groups: list) -> None:
    root = tmp_path_factory.mktemp("admit")
    with _open(root / "one") as one, _open(root / "many") as many:
        for group in groups:
            want = [one.admit_pages([(pairs, depth)])[0] for pairs, depth in group]
            got = many.admit_pages(group)
            assert [[(n.url, n.key, n.host, n.depth) for n in page] for page in got] == \
                [[(n.url, n.key, n.host, n.depth) for n in page] for page in want]
            rows = sorted((n.seq, n.depth) for page in got for n in page)
            assert len({seq for seq, _ in rows}) == len(rows)
            # one journal batch per depth, shallowest first
            assert [d for _, d in rows] == sorted(d for _, d in rows)
            for page in got:  # each row holds what was handed back for it
                for n in page:
                    row = many.ledger.get(fingerprint(n.key, many.seed))
                    assert row is not None
                    assert (row["seq"], row["url"], row["depth"]) == (n.seq, n.url, n.depth)
        for key in ("links", "new", "repeats"):
            assert many.counters[key] == one.counters[key], key
        assert many.ledger.counts() == one.ledger.counts()
