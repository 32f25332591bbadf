"""The compiled one-pass seen-test (``confirm_links``, ``OneLink`` in
``dedup/native/_canon.c``; pending admissions in ``dedup.store.pending``) against the
two steps it replaces (``Canonicalizer.resolve_many`` then ``ConfirmCache.count_hits``),
on generated pages with duplicates within a page, confirm-cache hits in both
generations, pending keys, rejected links and links left to the Python path; and
``UrlSeen`` page by page and URL by URL, compiled against ``BLOOMCRAWL_NO_KERNEL``."""

from __future__ import annotations

import gc
import os
import random
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

from dedup import UrlSeen
from dedup.filter.shards import ShardedBloom
from dedup.native import compiled
from dedup.store.confirmed import PENDED, CacheMisses, ConfirmCache
from dedup.store.pending import PendingKeys
from dedup.url.canonical import Canonicalizer
from dedup.url.fingerprint import fingerprint, halves

from . import linkgen
from .conftest import require_kernel

SEED = 7


def pages_with_repeats(seed: int, n: int, k: int) -> list[tuple[str | None, list[str]]]:
    """Generated pages whose links repeat within a page and across pages, plus a page
    with no base (absolute links only) and one whose base is not http(s)."""
    rng = random.Random(seed)
    gen = linkgen.LinkGen(seed=seed, weird=0.05)
    out: list[tuple[str | None, list[str]]] = []
    for base, links in gen.pages(n, k):
        links = list(links)
        links += rng.sample(links, k // 3)  # duplicates within the page
        if out:
            links += rng.sample(out[-1][1], k // 4)  # the previous page's links
        rng.shuffle(links)
        out.append((base, links))
    out.append((None, ["http://a.test/x", "https://B.test/y?b=2&a=1", "/rel", "mailto:x",
                       "http://a.test/x#f"]))
    out.append(("about:blank", ["http://a.test/x", "/rel"]))
    return out


def two_steps(cache: ConfirmCache, canon: Canonicalizer, base: str | None, links: list[str],
              pending: set[bytes]) -> tuple[int, int, list[str], list[str], bytes]:
    """What the one pass must equal: resolve, count hits, then drop pending keys."""
    pairs = canon.resolve_many(links, base)
    out = CacheMisses(4)
    hits = cache.count_hits(pairs, out)
    keys, values, fps = [], [], b""
    for i, key in enumerate(out.keys):
        fp = bytes(out.fps[16 * i:16 * i + 16])
        if fp in pending:
            hits += 1
            continue
        keys.append(key)
        values.append(out.values[i])
        fps += fp
    return hits, pairs.count(None), keys, values, fps


def test_confirm_links_is_resolve_then_count_hits():
    """Page after page, two confirm caches (one per path, same keys added) and the same
    pending keys: the one pass and the two steps give the same hits, rejections, keys,
    URLs and fingerprints in the same order, and leave the caches the same."""
    require_kernel()
    canon_a, canon_b = Canonicalizer(seed=SEED), Canonicalizer(seed=SEED)
    # a small cache: generations swap and tables grow during the run
    one, two = ConfirmCache(64, SEED), ConfirmCache(64, SEED)
    pending, pending_set = PendingKeys(), set()
    rng = random.Random(1)
    left_over = compiled_links = 0
    for base, links in pages_with_repeats(3, 120, 40):
        out = CacheMisses(4)
        got = one.count_links(tuple(links), base, canon_a, out, pending.table)
        want = two_steps(two, canon_b, base, links, pending_set)
        if got is None:  # not an http(s) page: the caller takes the two steps
            assert base is not None and not base.startswith("http")
            assert two_steps(one, canon_a, base, links, pending_set) == want
            continue
        hits, rejected, screened = got
        left_over += not screened
        assert (hits, rejected, out.keys, out.values, bytes(out.fps)) == want \
            or not screened  # a left-over link was not checked against pending keys
        if not screened:  # then only the keys pending drops may differ
            fps = bytes(out.fps)
            kept = [j for j in range(len(out.keys)) if fps[16 * j:16 * j + 16]
                    not in pending_set]
            assert [out.keys[j] for j in kept] == want[2]
            assert hits + len(out.keys) - len(kept) == want[0]
        assert len(one) == len(two)
        # some misses become confirmed (in both caches), some pending
        fps = want[4]
        for j in range(0, len(fps), 16):
            fp = fps[j:j + 16]
            if rng.random() < 0.4:
                one.add(halves(fp))
                two.add(halves(fp))
            elif rng.random() < 0.3:
                pending.add(fp)
                pending_set.add(fp)
        if rng.random() < 0.05:
            pending.clear()
            pending_set.clear()
        compiled_links += canon_a.cache_info()["compiled"]
    assert left_over, "no page had a link for the Python path"
    assert compiled_links


def test_count_link_is_count_links_of_one():
    """``count_link`` (one URL, no pass) answers as ``count_links`` of a one-link page:
    True for a hit or a pending key, None rejected, (url, key, fingerprint) a miss,
    False where only the two steps can."""
    require_kernel()
    canon_a, canon_b = Canonicalizer(seed=SEED), Canonicalizer(seed=SEED)
    one, two = ConfirmCache(32, SEED), ConfirmCache(32, SEED)
    pending = PendingKeys()
    rng = random.Random(2)
    kinds = set()
    for base, links in pages_with_repeats(4, 60, 20):
        for link in links:
            got = one.count_link(link, base, canon_a, pending.table)
            out = CacheMisses(4)
            want = two.count_links((link,), base, canon_b, out, pending.table)
            if want is None or not want[2]:
                assert got is False
                kinds.add("python")
                pairs = canon_b.resolve_many([link], base)  # keep the two caches alike
                got_hits = one.count_hits(pairs, CacheMisses(4))
                assert got_hits == (two.count_hits(pairs, CacheMisses(4)) if want is None
                                    else want[0])
                continue
            hits, rejected, _ = want
            if rejected:
                assert got is None
                kinds.add("rejected")
            elif hits:
                assert got is True
                kinds.add("hit")
            else:
                assert got == (out.values[0], out.keys[0], bytes(out.fps))
                assert got[2] == fingerprint(got[1], SEED)
                kinds.add("miss")
                if rng.random() < 0.5:
                    one.add(halves(got[2]))
                    two.add(halves(got[2]))
                else:
                    pending.add(got[2])
            assert len(one) == len(two)
    assert kinds == {"python", "rejected", "hit", "miss"}


def test_one_link_follows_replaced_tables_and_new_layers():
    """``count_link`` with a Bloom filter and a pending batch (``UrlSeen.add``'s one
    compiled call, ``OneLink.one``), across confirm-cache swaps and growth, pending
    keys written (cleared) and grown, and filter layers added: each answer is the two
    steps' (a hit; a miss the filter may hold, as a tuple; else PENDED with the key
    appended to the batch and pending), although the object keeps the buffers of the
    tables it was last given."""
    require_kernel()
    canon_a, canon_b = Canonicalizer(seed=SEED), Canonicalizer(seed=SEED)
    one, two = ConfirmCache(32, SEED), ConfirmCache(32, SEED)
    pending, pending_set = PendingKeys(), set()
    bloom = ShardedBloom(shards=2, capacity=64, error_rate=0.01, seed=SEED)
    rng = random.Random(3)
    kinds: dict[str, int] = {}
    layers_seen = set()
    for base, links in pages_with_repeats(6, 80, 30):
        for link in links:
            if one.page_of(base, canon_a) is None:
                assert base is not None and not base.startswith("http")
                continue
            out = CacheMisses(4)  # the two steps first: the call may add a pending key
            want = two.count_links((link,), base, canon_b, out, pending.table)
            stack = bloom.stack
            batch = bytearray(b"x" * 16)
            got = one.count_link(link, base, canon_a, pending.table, pending_held=pending.held,
                                 batch=batch, stack=stack)
            assert want is not None
            hits, rejected, screened = want
            if got is False:
                assert not screened
                kinds["python"] = kinds.get("python", 0) + 1
                one.count_hits(canon_a.resolve_many([link], base), CacheMisses(4))
                continue
            if rejected:
                assert got is None
            elif hits:
                assert got is True
            else:
                fp = bytes(out.fps)
                maybe = bloom.maybe_fingerprints(fp) or fp == bytes(16)
                if maybe:
                    assert got == (out.values[0], out.keys[0], fp)
                else:
                    assert got is PENDED
                    assert bytes(batch) == b"x" * 16 + fp
                    assert fp not in pending_set and pending.absent(fp) == []
                    pending.held_more(1)
                    pending_set.add(fp)
                    if rng.random() < 0.5:  # written: its bits set, as a flush does
                        bloom.add_hashes(halves(fp))
                if rng.random() < 0.3:
                    one.add(halves(fp))
                    two.add(halves(fp))
            kind = "tuple" if type(got) is tuple else {None: "rejected", True: "hit",
                                                         PENDED: "new"}[got]
            kinds[kind] = kinds.get(kind, 0) + 1
            assert bytes(batch[:16]) == b"x" * 16 and len(one) == len(two)
            assert len(pending) == len(pending_set)
            if rng.random() < 0.02:
                pending.clear()
                pending_set.clear()
            layers_seen.add(len(bloom.stack.probe_layers))
    assert set(kinds) >= {"python", "rejected", "hit", "new", "tuple"}
    assert len(layers_seen) > 1  # the filter grew a layer during the run


def test_one_link_refuses_bad_tables():
    """Shared memory, a full pending table, a non-bytearray batch and a bad layer are
    refused with an error (not read or written through), and the next good call works."""
    require_kernel()
    canon = Canonicalizer(seed=SEED)
    cache = ConfirmCache(32, SEED)
    rules, page = canon.fast_page("https://a.test/d/p.html")
    one = cache.one
    bloom = ShardedBloom(shards=2, capacity=64, error_rate=0.01, seed=SEED)
    st = bloom.stack
    young, old = np.zeros(16, dtype=np.uint64), np.zeros(16, dtype=np.uint64)
    pend = np.zeros(16, dtype=np.uint64)  # 8 slots: 4 keys at most

    def call(y=young, o=old, p=pend, held=0, batch=None, layers=st.probe_layers):
        return one.one("/x", rules, page, y, 0, o, 4, p, held, batch, st.rows, layers,
                       st.nlayers)

    with pytest.raises(ValueError, match="share memory"):
        call(o=young)
    with pytest.raises(ValueError, match="half full"):
        call(held=4, batch=bytearray())
    with pytest.raises(TypeError, match="bytearray"):
        call(batch=b"")
    with pytest.raises(ValueError, match="layer"):
        call(batch=bytearray(), layers=((st.probe_layers[0][0], 1, 1, 1, 0),))
    batch = bytearray()
    assert call(batch=batch) is True and len(batch) == 16
    assert call(batch=bytearray()) == 0  # now pending: a hit
    one.release()
    assert call(batch=bytearray()) == 0  # the buffers asked for again


@pytest.mark.parametrize("n", [0, 1, 5, 3000])
def test_pending_keys_hold_what_was_added(n):
    """The compiled table and the set answer alike, through growth and clear."""
    rng = random.Random(n)
    blob = rng.randbytes(16 * n)
    other = rng.randbytes(16 * 50)
    pk = PendingKeys()
    pk.add(blob)
    assert len(pk) == n
    assert pk.absent(blob) == []
    assert pk.absent(other) == list(range(50))
    if pk.table is not None:
        rows = pk.table.reshape(-1, 2)
        assert int(np.count_nonzero(rows[:, 0] | rows[:, 1])) == n
        assert 4 * n < len(pk.table)  # at most half full, as confirm_links takes it
    pk.clear()
    assert len(pk) == 0
    assert pk.absent(blob) == list(range(n))


@pytest.mark.parametrize("crowded", [False, True])
@pytest.mark.parametrize("feed", ["page", "url"])
def test_urlseen_page_and_url_calls_match_the_python_path(tmp_path: Path, feed: str,
                                                          crowded: bool,
                                                          monkeypatch: pytest.MonkeyPatch):
    """Every answer and counter of ``filter_new`` page by page (or ``add`` link by link)
    on generated pages, compiled and with no compiled module, with a small confirm
    cache and pending limit so hits, pending keys, flushes and swaps all happen;
    ``crowded``: a filter planned for 300 keys at 30% error, so it adds layers and
    answers "maybe seen" for keys the index does not hold (false positives)."""
    require_kernel()
    pages = pages_with_repeats(5, 150, 30)
    kw = {"confirm_cache_size": 200, "pending_keys": 50, "capacity": 20_000}
    if crowded:
        kw.update(capacity=300, error_rate=0.3)

    def run(d: Path) -> tuple[list[object], dict[str, int]]:
        answers: list[object] = []
        with UrlSeen(d, **kw) as seen:
            for base, links in pages:
                if feed == "page":
                    answers.append(seen.filter_new(links, base_url=base))
                else:
                    answers.append([seen.add(link, base) for link in links])
            counters = dict(seen.counters)
        return answers, counters

    fast = run(tmp_path / "compiled")
    for name in ("kernel", "lookup", "canon", "rowcrc"):
        monkeypatch.setattr(compiled, name, None)
    slow = run(tmp_path / "python")
    assert fast == slow
    assert fast[1]["new"] and fast[1]["rejected"] and fast[1]["confirm_cache_hits"]
    assert fast[1]["bloom_maybe"] and bool(fast[1]["false_positives"]) == crowded


def _state(seen: UrlSeen) -> tuple[object, ...]:
    """What one call of ``add`` may change, as Python reads it: the counters (folded),
    the canonicalizer's count of compiled links, the pending admissions and the
    confirm cache."""
    return (dict(seen.counters), seen.canonicalizer.cache_info()["compiled"],
            seen._pending_n, len(seen._pending),
            {d: bytes(b) for d, b in seen._pending_fps.items() if b},
            len(seen._confirmed), len(seen.ledger))


@pytest.mark.parametrize("crowded", [False, True])
@pytest.mark.parametrize("seconds", [1.0, 0.0])
def test_compiled_add_is_the_python_add(tmp_path: Path, crowded: bool, seconds: float):
    """``UrlSeen.add`` is the compiled ``OneLink.add`` bound on the instance; call by
    call, it answers as the Python ``UrlSeen.add`` (the same compiled modules, the
    steps in Python) and leaves the same counters, compiled-link count, pending
    admissions (batches by depth, keys, count), confirm cache and ledger: through
    repeats in both generations (a small cache swaps), pending hits, flushes by count
    (``pending_keys=40``) or by age (``seconds`` 0: at every call), rejected links,
    links and bases it hands to the Python steps, keyword arguments, depths, a
    filter that adds layers and answers "maybe seen" (``crowded``: false positives
    too). Then by age: a key waits ``pending_seconds`` and no more; closing folds the
    counts and unbinds (a kept ``add`` then refuses); an unclosed one is collected
    (the instance and its compiled add refer to each other)."""
    require_kernel()
    kw: dict[str, object] = {"confirm_cache_size": 64, "pending_keys": 40,
                             "capacity": 5000, "pending_seconds": seconds}
    if crowded:
        kw.update(capacity=300, error_rate=0.3)
    pages = pages_with_repeats(8, 120, 30)
    rng = random.Random(4)
    c_dir, p_dir = tmp_path / "c", tmp_path / "p"
    with UrlSeen(c_dir, **kw) as c, UrlSeen(p_dir, **kw) as p:
        assert "add" in vars(c) and c.add.__self__ is c._adder  # the compiled one
        kept_add = c.add
        python_add = UrlSeen.add.__get__(p)
        for n, (base, links) in enumerate(pages):
            depth = n % 3
            for link in links:
                how = rng.randrange(4)
                if how == 0:
                    got, want = c.add(link, base), python_add(link, base)
                elif how == 1:
                    got = c.add(link, base_url=base, depth=depth)
                    want = python_add(link, base_url=base, depth=depth)
                else:
                    got, want = c.add(link, base, depth=depth), python_add(link, base,
                                                                             depth=depth)
                assert got is want, (link, base)
                assert _state(c) == _state(p), (link, base)
        counters = dict(c.counters)
        assert counters["new"] and counters["rejected"] and counters["bloom_maybe"]
        assert counters["false_positives"] or not crowded
        assert c.canonicalizer.cache_info()["compiled"] < counters["links"] + \
            counters["rejected"]  # some links went to the Python steps
    assert "add" not in vars(c) and c._adder is None and dict(c.counters) == counters
    with pytest.raises(ValueError, match="closed"):
        kept_add("https://a.test/late")  # a bound add kept past close() refuses

    # by age: pending until pending_seconds have passed, written by the next call then
    with UrlSeen(tmp_path / "age", pending_seconds=0.4) as seen:
        assert seen.add("https://a.test/1") is True
        assert seen.add("https://a.test/1") is False
        assert seen._pending_n == 1 and len(seen.ledger) == 0
        time.sleep(0.45)
        assert seen.add("https://a.test/1") is False
        assert seen._pending_n == 0 and len(seen.ledger) == 1
        assert seen.counters["new"] == 1 and seen.counters["repeats"] == 2

    seen = UrlSeen(tmp_path / "gc")
    seen.add("https://a.test/1")
    fd, ref = seen._lock_fd, weakref.ref(seen)
    seen.ledger.close()
    del seen
    gc.collect()
    assert ref() is None
    os.close(fd)  # type: ignore[arg-type]


def test_pending_keys_clear_keeps_a_grown_table_empty():
    """A write's clear() keeps the table the keys grew (a call a URL would regrow it
    each time), holding nothing: every key is absent and can be pended again."""
    require_kernel()
    pk = PendingKeys()
    blob = os.urandom(16 * 5000)
    pk.add(blob)
    grown = pk.table
    assert grown is not None and len(grown) > 2 * 2048  # grown past its first table
    pk.clear()
    assert pk.table is grown and not grown.any() and len(pk) == 0
    assert pk.absent(blob[:160]) == list(range(10))
    pk.add(blob[:160])
    assert pk.absent(blob[:160]) == [] and len(pk) == 10
