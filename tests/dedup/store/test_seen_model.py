"""UrlSeen answers exactly like a set, through the whole stack (canonicalizer, Bloom
filter, journal, fingerprint index with a tiny buffer so flushes and merges happen),
under random admit / forget / snapshot / reopen sequences on two state dirs, and
their fleet-style union (``dedup.admin.resizing.merge_states``) answers like the union."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import UrlSeen
from dedup.admin.resizing import merge_states

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

UNIVERSE = [f"http://h{i % 4}.test/p/{i}" for i in range(40)]
URLS = st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=6)
OP = st.one_of(
    st.tuples(st.just("admit"), st.integers(0, 1), URLS),
    st.tuples(st.just("forget"), st.integers(0, 1), URLS),
    st.tuples(st.just("snapshot"), st.integers(0, 1), st.just([])),
    st.tuples(st.just("reopen"), st.integers(0, 1), st.just([])),
)


def open_seen(d: Path) -> UrlSeen:
    return UrlSeen(d, capacity=64, shards=2, crawl_id="model", index_buffer=8)


def assert_like(seen: UrlSeen, live: set[str]) -> None:
    for url in UNIVERSE:
        maybe, row = seen.check(url)
        assert (row is not None) == (url in live), url
        if url in live:
            assert maybe, f"{url}: a false negative in the Bloom filter"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OP, max_size=30))
def test_two_dirs_and_their_union_answer_like_sets(tmp_path_factory: pytest.TempPathFactory,
                                                   ops: list) -> None:
    root = tmp_path_factory.mktemp("model")
    dirs = [root / "a", root / "b"]
    live: list[set[str]] = [set(), set()]
    seens = [open_seen(d) for d in dirs]
    try:
        for op, i, urls in ops:
            seen = seens[i]
            if op == "admit":
                new = {n.url for n in seen.admit(urls)}
                assert new == set(urls) - live[i]  # exactly the ones not live
                live[i] |= new
            elif op == "forget":
                assert seen.forget(urls) == len(set(urls) & live[i])
                live[i] -= set(urls)
            elif op == "snapshot":
                seen.snapshot()
            else:
                seen.close()
                seens[i] = open_seen(dirs[i])
            assert_like(seens[i], live[i])
    finally:
        for seen in seens:
            seen.close()
    merge_states(root / "union", dirs)
    with open_seen(root / "union") as union:
        assert_like(union, live[0] | live[1])
        fresh = union.filter_new(UNIVERSE)
        assert len(fresh) == len(set(UNIVERSE) - live[0] - live[1])
