"""The compiled kernel gives the bits and fingerprints of the numpy and mmh3 code,
and refuses bad lengths and indexes instead of writing outside a filter."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dedup.filter.layers as layers_mod
from dedup.filter.arena import Arena
from dedup.filter.bloom import BloomFilter
from dedup.filter.geometry import layer_geometry
from dedup.filter.shards import ShardedBloom
from dedup.native import compiled
from dedup.url.fingerprint import fingerprint, fingerprint_many, halves
from tests.dedup.conftest import require_kernel

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=70)  # no lone surrogates
keys_st = st.lists(st.one_of(text, st.binary(max_size=70)), max_size=60)


@pytest.fixture
def k():
    require_kernel()
    return compiled.kernel


@given(keys_st, st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_fingerprints_are_mmh3_hash_bytes(keys, seed):
    require_kernel()
    want = b"".join(mmh3.hash_bytes(key, seed) for key in keys)
    assert compiled.kernel.fingerprints(keys, seed) == want
    assert compiled.kernel.fingerprints(iter(keys), seed) == want


def test_fingerprints_of_every_tail_length_and_buffer_keys(k):
    keys = ["x" * n for n in range(40)] + ["é" * n for n in range(20)]
    assert k.fingerprints(keys, 99) == b"".join(mmh3.hash_bytes(s, 99) for s in keys)
    assert k.fingerprints([memoryview(b"abc")], 0) == mmh3.hash_bytes(b"abc")


def test_fingerprints_refuse_bad_keys_and_seeds(k):
    with pytest.raises(TypeError, match="str or bytes-like"):
        k.fingerprints(["a", 5], 0)
    with pytest.raises(ValueError, match="seed is out of range"):
        k.fingerprints(["a"], 2**32)
    with pytest.raises(ValueError, match="seed is out of range"):
        k.fingerprints(["a"], -1)
    with pytest.raises(UnicodeEncodeError):
        k.fingerprints(["ok", "\ud800"], 0)


def _arena(rows: int = 3) -> Arena:
    return Arena(layer_geometry(1000, 0.01, 2, 1), rows)  # layer 1: a nonzero salt


def test_layer_test_and_set_match_the_numpy_code(k, monkeypatch):
    h = halves(fingerprint_many([f"u{i}" for i in range(500)]))
    rows = (np.arange(500) % 3).astype(np.intp)
    sel = np.arange(0, 500, 2, dtype=np.intp)
    from dedup.filter import arena as arena_mod
    got = {}
    for impl in ("compiled", "numpy"):
        if impl == "numpy":
            monkeypatch.setattr(compiled, "kernel", None)
        a = _arena()
        arena_mod.set_bits(a, h, rows, sel)
        got[impl] = (a.words.copy(), arena_mod.test(a, h, rows), arena_mod.test(a, h, rows, sel))
    (w1, t1, s1), (w2, t2, s2) = got["compiled"], got["numpy"]
    assert np.array_equal(w1, w2) and w1.any()
    assert np.array_equal(t1, t2) and np.array_equal(s1, s2) and s1.all()
    # the positions are those of the one-key Python twin
    a = _arena()
    arena_mod.set_bits(a, h[:1], None)
    h1, h2 = (int(x) for x in h[0])
    assert sorted(np.flatnonzero(np.unpackbits(a.words[0].view(np.uint8),
                                               bitorder="little"))) == sorted(
        set(a.positions(h1, h2)))


u64 = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))


@given(st.lists(st.tuples(u64, u64), min_size=1, max_size=20), u64,
       st.one_of(st.integers(64, 1 << 20), st.sampled_from([64, 65, 4096, (1 << 20) - 1])),
       st.integers(1, 12))
@settings(max_examples=300, deadline=None)
def test_kernel_positions_are_exact_mod_m_for_any_64_bit_hash(pairs, salt, m, nk):
    """uint64 wraparound, then mod m, for any hash, salt and layer size."""
    require_kernel()
    row_words = -(-m // 64)
    words = np.zeros(row_words, dtype=np.uint64)
    h = np.array(pairs, dtype=np.uint64)
    compiled.kernel.layer_set(words, h, None, None, row_words, m, nk, salt)
    want = {((h1 + salt + t * h2) % 2**64) % m for h1, h2 in pairs for t in range(nk)}
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    assert set(np.flatnonzero(bits).tolist()) == want
    out = np.empty(len(h), dtype=bool)
    compiled.kernel.layer_test(words, h, None, None, row_words, m, nk, salt, out)
    assert out.all()


def test_kernel_positions_in_a_layer_of_billions_of_bits(k):
    """m past 2**32 (a 10B-URL crawl's layer): untouched words cost nothing (calloc)."""
    for m in (2**32 + 65, 2**33 + 7):
        words = np.zeros(m // 64 + 1, dtype=np.uint64)
        pairs = [(2**64 - 1, 2**64 - 3), (12345, 2**63 + 1), (0, 0)]
        k.layer_set(words, np.array(pairs, dtype=np.uint64), None, None, len(words), m, 5, 0)
        want = {((h1 + t * h2) % 2**64) % m for h1, h2 in pairs for t in range(5)}
        got = {int(w) * 64 + b for w in np.flatnonzero(words)
               for b in range(64) if int(words[w]) >> b & 1}
        assert got == want


def test_layer_calls_refuse_out_of_range_indexes_and_bad_lengths(k):
    a = _arena()
    h = halves(fingerprint_many(["a", "b"]))
    row_words, args = a.words.shape[1], (a.m, a.k, a.salt)
    out = np.empty(2, dtype=bool)
    for rows, sel in [(np.array([0, 3], np.intp), None), (np.array([0, -1], np.intp), None),
                      (None, np.array([2], np.intp)), (None, np.array([-1], np.intp))]:
        with pytest.raises(IndexError):
            k.layer_set(a.flat, h, rows, sel, row_words, *args)
        with pytest.raises(IndexError):
            k.layer_test(a.flat, h, rows, sel, row_words, *args, out[:1] if sel is not None
                         else out)
    assert not a.words.any()  # the refused calls wrote nothing
    with pytest.raises(ValueError, match="one intp per key"):
        k.layer_set(a.flat, h, np.zeros(3, np.intp), None, row_words, *args)
    with pytest.raises(TypeError, match="rows must be intp"):
        k.layer_set(a.flat, h, np.zeros(2, np.int32), None, row_words, *args)
    with pytest.raises(ValueError, match="one byte per selected key"):
        k.layer_test(a.flat, h, None, None, row_words, *args, np.empty(3, dtype=bool))
    with pytest.raises(ValueError, match="geometry"):
        k.layer_set(a.flat, h, None, None, row_words, row_words * 64 + 1, a.k, a.salt)
    with pytest.raises(ValueError, match=r"\(n, 2\) uint64"):
        k.layer_set(a.flat, np.zeros(3, np.uint64), None, None, row_words, *args)
    with pytest.raises(TypeError, match="hashes must be uint64"):
        k.layer_set(a.flat, b"x" * 16, None, None, row_words, *args)
    frozen = a.flat.copy()
    frozen.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        k.layer_set(frozen, h, None, None, row_words, *args)


@pytest.mark.parametrize("make", [lambda: BloomFilter(300, 0.01, seed=5),
                                  lambda: ShardedBloom(8, 600, 0.01, seed=5)])
def test_filters_grown_by_either_code_hold_the_same_bits(k, monkeypatch, make):
    """Growth layers (salted), shards, repeats and a probe-then-add: same bits."""
    keys = [f"https://h{i % 7}.example/{i % 1500}" for i in range(4000)]
    built = []
    for impl in ("compiled", "numpy"):
        if impl == "numpy":
            monkeypatch.setattr(compiled, "kernel", None)
        bf = make()
        news = [bf.add_many(keys[a:a + 700]) for a in range(0, 3000, 700)]
        h = halves(fingerprint_many([f"https://n.example/{i % 300}" for i in range(400)]))
        p = bf.probe_hashes(h)
        bf.add_probed(p, np.unique(h[:, 0], return_index=True)[1])
        built.append((bf, np.concatenate(news), p.found, bf.contains_many(keys)))
    (a, na, fa, ca), (b, nb, fb, cb) = built
    assert a == b and a.layers > 1
    assert np.array_equal(na, nb) and np.array_equal(fa, fb) and np.array_equal(ca, cb)
    assert ca[:3000].all()  # no false negative


@given(st.lists(st.integers(0, 40), max_size=300), st.lists(st.booleans(), max_size=300))
@settings(max_examples=200, deadline=None)
def test_first_new_keeps_each_absent_fingerprint_once_in_order(ids, flags):
    """Few distinct ids, so repeats are common; equal h1 with another h2 is distinct."""
    require_kernel()
    h = np.array([[i % 7, i] for i in ids], dtype=np.uint64).reshape(-1, 2)
    present = np.array((flags + [False] * len(ids))[:len(ids)], dtype=bool)
    want = layers_mod._first_occurrences(h[:, 0], h[:, 1], np.flatnonzero(~present))
    out = np.empty(len(h), dtype=np.intp)
    got = out[:compiled.kernel.first_new(h, present, out)]
    assert got.tolist() == want.tolist()


def test_ci_builds_the_kernel():
    require_kernel()
    assert compiled.kernel.fingerprints(["a"], 0) == fingerprint("a")


@pytest.mark.parametrize("shards", [1, 8])
def test_stack_maybe_answers_as_the_filter_on_grown_layers(k, monkeypatch, shards):
    """The seen-test's one-call probe of a page's fingerprints: the indexes the numpy
    path (and ``contains_hashes``) says may be held, on a filter grown by layers
    (salted, rows with different layer counts)."""
    bf = ShardedBloom(shards, 300, 0.05, seed=3)
    bf.add_many([f"https://h.example/{i}" for i in range(500 if shards > 1 else 2000)])
    assert bf.layers > 1
    assert shards == 1 or len(set(bf._stack.nlayers.tolist())) > 1
    fps = fingerprint_many([f"https://h.example/{i}" for i in range(0, 4000, 3)], 3)
    want = np.flatnonzero(bf.contains_hashes(halves(fps))).tolist()
    assert 0 < len(want) < len(fps) // 16
    assert bf.maybe_fingerprints(fps) == want
    assert bf.maybe_fingerprints(bytearray(fps)) == want
    assert bf.maybe_fingerprints(b"") == []
    monkeypatch.setattr(compiled, "kernel", None)
    assert bf.maybe_fingerprints(fps) == want


def test_stack_maybe_refuses_what_would_read_outside_the_filter(k):
    bf = ShardedBloom(4, 300, 0.01)
    a = bf._stack.arenas[0]
    layer = (a.flat, a.words.shape[1], a.m, a.k, a.salt)
    nl = bf._stack.nlayers
    fp = fingerprint("x")
    assert k.stack_maybe(fp, 4, (layer,), nl) == []
    with pytest.raises(ValueError, match="16 bytes each"):
        k.stack_maybe(fp[:15], 4, (layer,), nl)
    with pytest.raises(ValueError, match="one intp per row"):
        k.stack_maybe(fp, 5, (layer,), nl)
    with pytest.raises(ValueError, match="more layers than given"):
        k.stack_maybe(fp, 4, (layer,), nl + 1)
    with pytest.raises(ValueError, match="bad layer geometry"):  # m past the row's words
        k.stack_maybe(fp, 4, ((a.flat, a.words.shape[1], 64 * a.words.shape[1] + 1, a.k,
                               0),), nl)
    with pytest.raises(ValueError, match="bad layer geometry"):  # rows past the words
        k.stack_maybe(fp, 4, ((a.flat[:a.words.shape[1]], a.words.shape[1], a.m, a.k, 0),),
                      nl)
    with pytest.raises(TypeError, match="uint64"):
        k.stack_maybe(fp, 4, ((a.flat.view(np.int8), a.words.shape[1], a.m, a.k, 0),), nl)
    with pytest.raises(TypeError):
        k.stack_maybe(fp, 4, ((a.flat,),), nl)
