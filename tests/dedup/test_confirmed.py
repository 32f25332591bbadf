"""ConfirmCache: the seen-test's cache of recent keys, by fingerprint. The
compiled pass and the Python one answer alike, and like a key-by-key model."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.store.confirmed import CacheMisses, ConfirmCache
from dedup.store.seen import CONFIRM_CACHE_SIZE, UrlSeen
from dedup.url.fingerprint import fingerprint_many, halves

pytestmark = pytest.mark.usefixtures("lookup_impl")  # compiled pass and Python alike
SEED = 7


def held(c: ConfirmCache, keys: list[str]) -> list[str]:
    """The keys of ``keys`` the cache answers "held" (and promotes), in a fresh
    pass of its own."""
    out = CacheMisses()
    c.count_hits([(k, k) for k in keys], out)
    return [k for k in keys if k not in out.keys]


def test_split_keeps_first_values_in_order_with_their_fingerprints():
    c = ConfirmCache(100, SEED)
    c.add(halves(fingerprint_many(["a", "b"], SEED)))
    pairs = [("1", "c"), ("2", "a"), None, ("3", "c"), ("4", "dé"), ("5", "b"), ("6", "a")]
    out = CacheMisses()
    hits = c.count_hits(pairs, out)
    assert (out.keys, out.values) == (["c", "dé"], ["1", "4"])
    assert hits == 3  # a, b, a: every held pair counts
    assert bytes(out.fps) == fingerprint_many(["c", "dé"], SEED)


def test_split_takes_any_sequence_of_pairs():
    c = ConfirmCache(100, SEED)
    c.add(halves(fingerprint_many(["a"], SEED)))
    out = CacheMisses()
    assert c.count_hits((("1", "a"), None, ("2", "b")), out) == 1
    assert (out.keys, out.values) == (["b"], ["2"])


def test_split_continues_over_pages_and_grows_past_its_batch_table():
    c = ConfirmCache(100, SEED)
    out = CacheMisses()
    assert c.count_hits([("1", "a"), ("2", "b")], out) == 0
    assert c.count_hits([("3", "b"), ("4", "c")], out) == 0
    assert (out.keys, out.values) == (["a", "b", "c"], ["1", "2", "4"])
    assert bytes(out.fps) == fingerprint_many(["a", "b", "c"], SEED)
    many = [f"k{i}" for i in range(20_000)]  # the batch table starts at 4096 slots
    assert c.count_hits([(k, k) for k in many + many[::-1]], out) == 0
    assert out.keys == ["a", "b", "c", *many] and len(out) == 20_003
    assert bytes(out.fps) == fingerprint_many(out.keys, SEED)


def test_old_keys_hit_move_back_and_survive_the_next_swap():
    c = ConfirmCache(4, SEED)  # generations of 2
    c.add(halves(fingerprint_many(["a", "b"], SEED)))  # full: becomes the old one
    assert len(c) == 2
    assert held(c, ["a", "a"]) == ["a", "a"]  # a moves to the young generation
    c.add(halves(fingerprint_many(["c"], SEED)))  # young {a, c} swaps: b dropped
    assert held(c, ["a", "b", "c"]) == ["a", "c"]


def test_the_seed_is_the_ledgers():
    c = ConfirmCache(100, SEED)
    c.add(halves(fingerprint_many(["a"], SEED + 1)))
    assert held(c, ["a"]) == []


def test_size_zero_holds_nothing_and_clear_forgets():
    c = ConfirmCache(0, SEED)
    c.add(halves(fingerprint_many(["a"], SEED)))
    assert held(c, ["a"]) == [] and len(c) == 0
    c = ConfirmCache(20, SEED)
    c.add(halves(fingerprint_many(list("abcdef"), SEED)))
    assert len(c) == 6 and held(c, list("abcdefz")) == list("abcdef")
    c.clear()
    assert len(c) == 0 and held(c, ["a"]) == []


def test_the_empty_fingerprint_is_never_held():
    c = ConfirmCache(20, SEED)
    c.add(np.zeros((3, 2), dtype=np.uint64))
    assert len(c) == 0


def test_split_refuses_what_is_not_a_pair_with_a_str_key():
    for bad in ([("1", "a"), ("2",)], [("1", b"a")], [("1", 3)]):
        with pytest.raises((TypeError, ValueError)):
            ConfirmCache(10, SEED).count_hits(bad, CacheMisses())
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate has no UTF-8
        ConfirmCache(10, SEED).count_hits([("1", "a\ud800")], CacheMisses())


class Model:
    """The eviction rule key by key: a key joins the young generation (from an
    add, or a hit in the old one); when that holds size // 2 keys it becomes
    the old one."""

    def __init__(self, size: int) -> None:
        self.half = size // 2 if size > 1 else size
        self.young: set[str] = set()
        self.old: set[str] = set()

    def add(self, k: str) -> None:
        if self.half and k not in self.young:
            self.young.add(k)
            if len(self.young) >= self.half:
                self.old, self.young = self.young, set()

    def count_hits(self, pairs: list) -> tuple[dict[str, str], int]:
        want: dict[str, str] = {}
        hits = 0
        for v, k in (p for p in pairs if p is not None):
            if k in self.young:
                hits += 1
            elif k in self.old:
                hits += 1
                self.add(k)
            elif k not in want:
                want[k] = v
        return want, hits


def check_batches(size: int, batches: list[tuple[bool, list]]) -> None:
    c, model = ConfirmCache(size, SEED), Model(size)
    for is_add, keys in batches:
        present = [k for k in keys if k is not None]
        if is_add:
            c.add(halves(fingerprint_many(present, SEED)))
            for k in present:
                model.add(k)
            continue
        pairs = [None if k is None else (str(i), k) for i, k in enumerate(keys)]
        out = CacheMisses()
        hits = c.count_hits(pairs, out)
        want, want_hits = model.count_hits(pairs)
        assert (out.keys, out.values, hits) == (list(want), list(want.values()), want_hits)
        assert bytes(out.fps) == fingerprint_many(list(want), SEED)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 8),
       batches=st.lists(st.tuples(st.booleans(), st.lists(
           st.one_of(st.sampled_from("abcdefghij"), st.none()), max_size=8)), max_size=20))
def test_split_and_add_answer_like_a_two_generation_model(size, batches):
    """Swaps midway through a batch included."""
    check_batches(size, batches)


def test_tables_grow_with_the_young_generation_and_answer_like_the_model():
    """A size whose tables start smaller than they end (4,096 slots, doubling
    up to 16,384): growth midway through a batch, then swaps."""
    rng = np.random.default_rng(5)
    universe = [f"https://h{i % 97}.example/p/{i}" for i in range(30_000)]
    batches = [(bool(rng.random() < 0.3),
                [universe[j] for j in rng.integers(0, len(universe), int(rng.integers(1, 900)))])
               for _ in range(120)]
    check_batches(12_000, batches)


def test_held_keys_survive_the_tables_growth():
    c = ConfirmCache(100_000, SEED)
    keys = [f"k{i}" for i in range(30_000)]
    for at in range(0, len(keys), 7_000):
        c.add(halves(fingerprint_many(keys[at:at + 7_000], SEED)))
    assert len(c) == 30_000 and held(c, keys) == keys
    if isinstance(c._young, np.ndarray):  # the compiled tables: grown from 4,096 slots
        assert len(c._young) == 2 * 65_536


def test_the_default_size_keeps_a_key_through_three_million_others(lookup_impl):
    """The default (UrlSeen's and the crawler's) holds the last 3 * 2**20 - 1 keys in
    two tables of 2**21 slots (64 MB): a repeat that far back is a hit, not a Bloom
    probe and an index read, the cost that grew with the seen-set on the page feed
    (bench/README.md, "Where the time goes")."""
    assert inspect.signature(UrlSeen).parameters["confirm_cache_size"].default \
        == CONFIRM_CACHE_SIZE >= 1 << 21
    if lookup_impl == "python":
        pytest.skip("two million fingerprints as Python bytes: the tables are the same")
    c = ConfirmCache(CONFIRM_CACHE_SIZE, SEED)
    c.add(halves(fingerprint_many(["first"], SEED)))
    rng = np.random.default_rng(1)
    others = rng.integers(1, 1 << 63, size=(CONFIRM_CACHE_SIZE - 2, 2), dtype=np.uint64)
    for at in range(0, len(others), 1 << 18):
        c.add(others[at:at + (1 << 18)])
    assert len(c) == CONFIRM_CACHE_SIZE - 1
    assert held(c, ["first", "never"]) == ["first"]
    # both generations full, each table 3/4 full: 64 MB, not the 128 of half-full tables
    assert c._young.nbytes + c._old.nbytes == 64 << 20
