"""BloomFilter: exact bit layout, no lost bits, batch semantics, FPR, growth, merge."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dedup.filter.bloom as bloom_mod
import dedup.filter.layers as layers_mod
from dedup.filter.bloom import BloomFilter
from dedup.filter.geometry import layer_geometry
from dedup.filter.snapshot import GeometryMismatch
from dedup.url.fingerprint import fingerprint, fingerprint_many, halves

pytestmark = pytest.mark.usefixtures("bit_impl")  # compiled kernel and numpy alike

M64 = 2**64 - 1
keys_st = st.lists(st.text(max_size=30), max_size=300)
fast = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def expected_positions(h1: int, h2: int, m: int, k: int) -> set[int]:
    """Kirsch–Mitzenmacher in uint64 wraparound, written independently of the code."""
    return {((h1 + i * h2) % 2**64) % m for i in range(k)}


def set_positions(bf: BloomFilter, layer: int = 0) -> set[int]:
    return set(bf.layer_bits(layer).search(1))


def first_occurrence_mask(keys: list) -> list[bool]:
    seen: set = set()
    out = []
    for key in keys:
        out.append(key not in seen)
        seen.add(key)
    return out


def absent_probes(n: int) -> np.ndarray:
    return halves(fingerprint_many(f"absent:{i}" for i in range(n)))


# -- geometry -------------------------------------------------------------------------------


def test_sizing_formula():
    bf = BloomFilter(1_000_000, 0.01)
    p0 = 0.01 * 0.8  # layer 0 gets 80% of the error budget
    raw = math.ceil(-1_000_000 * math.log(p0) / math.log(2) ** 2)
    assert bf.m % 64 == 0 and raw <= bf.m < raw + 64
    assert bf.k == round(bf.m / 1_000_000 * math.log(2)) == 7
    assert bf.layers == 1 and bf.count == 0 and len(bf) == 0


def test_layers_tighten_geometrically():
    geos = [layer_geometry(1000, 0.01, 2, i) for i in range(4)]
    assert [g.capacity for g in geos] == [1000, 2000, 4000, 8000]
    for i, g in enumerate(geos):
        assert g.error_rate == pytest.approx(0.01 * 0.8 * 0.2**i)
        assert g.m % 64 == 0
    assert sum(g.error_rate for g in geos) < 0.01
    assert [g.k for g in geos] == sorted(g.k for g in geos)


def test_numpy_integers_are_accepted():
    bf = BloomFilter(np.int64(1000), 0.01, seed=np.uint32(3), growth=np.int8(2))
    assert bf == BloomFilter(1000, 0.01, seed=3) and type(bf.capacity) is int


def test_tiny_capacity_still_has_a_whole_word_and_sane_k():
    bf = BloomFilter(1, 0.5)
    assert bf.m == 64 and 1 <= bf.k <= 64
    assert bf.add("x") and "x" in bf


@pytest.mark.parametrize("kwargs", [
    {"capacity": 0}, {"capacity": 1.5}, {"capacity": 10, "error_rate": 0},
    {"capacity": 10, "error_rate": 1}, {"capacity": 10, "seed": -1},
    {"capacity": 10, "seed": 2**32}, {"capacity": 10, "growth": 0},
])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError, match=f"^{list(kwargs)[-1]} must be"):
        BloomFilter(**kwargs)


# -- exact bit positions and no lost bits ------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, M64), st.integers(0, M64)), min_size=1, max_size=60))
@fast
def test_bits_are_exactly_the_kirsch_mitzenmacher_positions(pairs):
    bf = BloomFilter(100, 0.01)  # room for every pair: past capacity, new keys go to layer 1
    bf.add_hashes(np.array(pairs, dtype=np.uint64))
    assert bf.layers == 1
    want = set().union(*(expected_positions(a, b, bf.m, bf.k) for a, b in pairs))
    assert set_positions(bf) == want
    # the bitarray is a view of little-endian uint64 words: bit p is bit p%64 of word p//64
    words = bf.layer_words(0)
    assert {w * 64 + b for w in range(len(words)) for b in range(64)
            if int(words[w]) >> b & 1} == want


def test_fancy_or_assignment_would_lose_bits():
    # the hazard the implementation must avoid: repeated indices keep only one write
    w = np.zeros(1, dtype=np.uint64)
    w[np.array([0, 0])] |= np.array([1, 2], dtype=np.uint64)
    assert int(w[0]) != 3


def test_no_bit_is_lost_when_positions_share_a_word():
    bf = BloomFilter(1000, 0.01)
    # h2 = 0 puts all k positions of a key on bit h1 mod m: 64 keys fill word 0 exactly
    same_word = np.array([[b, 0] for b in range(64)], dtype=np.uint64)
    assert bf.add_hashes(same_word).all()
    assert int(bf.layer_words(0)[0]) == M64
    assert set_positions(bf) == set(range(64))
    # h2 = 1: the k positions of one key are consecutive bits of one word
    consecutive = np.array([[64 * w + 3, 1] for w in range(5, 40)], dtype=np.uint64)
    bf.add_hashes(consecutive)
    want = set(range(64)).union(*(expected_positions(a, b, bf.m, bf.k)
                                  for a, b in consecutive.tolist()))
    assert set_positions(bf) == want
    assert bf.contains_hashes(np.concatenate([same_word, consecutive])).all()


# -- batch semantics -----------------------------------------------------------------------------


@given(keys_st)
@fast
def test_no_false_negatives_and_first_occurrence_is_new(keys):
    bf = BloomFilter(10_000, 0.01)
    new = bf.add_many(keys)
    assert new.tolist() == first_occurrence_mask(keys)  # fill < 3%: no false positives
    assert bf.contains_many(keys).all()
    assert all(k in bf for k in keys)
    assert not bf.add_many(keys).any()
    assert bf.count == len(set(keys))


@given(keys_st)
@fast
def test_one_at_a_time_and_batch_give_identical_filters(keys):
    one, batch = BloomFilter(10_000, 0.01, seed=3), BloomFilter(10_000, 0.01, seed=3)
    assert [one.add(k) for k in keys] == batch.add_many(keys).tolist()
    assert one == batch and one.count == batch.count


def test_duplicates_in_a_batch_are_new_only_once(monkeypatch):
    bf = BloomFilter(1000, 0.01)
    keys = ["a", "b", "a", "c", "b", "d", "a"]
    assert bf.add_many(keys).tolist() == [True, True, False, True, False, True, False]
    assert bf.count == 4
    assert bf.add_many(["a", "e", "e"]).tolist() == [False, True, False]
    # across vectorized chunks too
    monkeypatch.setattr(bloom_mod, "CHUNK", 8)
    monkeypatch.setattr(layers_mod, "CHUNK", 8)
    bf2 = BloomFilter(1000, 0.01)
    keys = [f"k{i % 13}" for i in range(60)]
    assert bf2.add_many(keys).tolist() == first_occurrence_mask(keys)


def test_same_h1_different_h2_are_different_keys():
    bf = BloomFilter(10_000, 0.01)
    h = np.array([[5, 1], [5, 2], [5, 1], [9, 9], [5, 2], [7, 3], [9, 9], [5, 3]],
                 dtype=np.uint64)
    assert len(h) > bloom_mod.SMALL  # the vectorized path
    assert bf.add_hashes(h).tolist() == [True, True, False, True, False, True, False, True]


def test_hash_and_key_paths_agree():
    keys = [f"https://example.com/{i}" for i in range(500)]
    a, b = BloomFilter(1000, 0.01, seed=9), BloomFilter(1000, 0.01, seed=9)
    a.add_many(keys)
    b.add_hashes(halves(fingerprint_many(keys, 9)))
    assert a == b
    assert b.contains_hashes(halves(fingerprint_many(keys, 9))).all()
    assert bytes(fingerprint(keys[0], 9)) and keys[0] in b


def test_seed_is_part_of_the_positions():
    a, b = BloomFilter(1000, 0.01, seed=0), BloomFilter(1000, 0.01, seed=1)
    a.add_many(["x", "y"])
    b.add_many(["x", "y"])
    assert set_positions(a) != set_positions(b)
    assert a != b


def test_empty_and_odd_inputs():
    bf = BloomFilter(100)
    assert bf.add_many([]).shape == (0,) and bf.contains_many([]).shape == (0,)
    assert bf.add_hashes(np.zeros((0, 2), dtype=np.uint64)).shape == (0,)
    assert 42 not in bf
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        bf.contains_hashes(np.zeros(4, dtype=np.uint64))


# -- false-positive rate and growth --------------------------------------------------------------


@pytest.mark.parametrize("p", [0.01, 0.001])
def test_fpr_at_planned_capacity(p):
    n = 100_000
    bf = BloomFilter(n, p)
    bf.add_many(f"https://example.com/{i}" for i in range(n))
    assert bf.layers == 1
    fpr = bf.contains_hashes(absent_probes(1_000_000)).mean()
    assert 0.5 * p <= fpr <= 1.25 * p
    assert bf.info()["expected_fpr"] == pytest.approx(fpr, rel=0.25)


@pytest.mark.parametrize("p", [0.01, 0.001])
def test_fpr_at_four_times_capacity_after_growth(p):
    n = 25_000
    bf = BloomFilter(n, p)
    keys = [f"https://example.com/{i}" for i in range(4 * n)]
    bf.add_many(keys)
    assert bf.layers == 3  # 25k + 50k + a partly filled 100k layer
    assert bf.contains_many(keys).all()
    fpr = bf.contains_hashes(absent_probes(1_000_000)).mean()
    assert fpr <= 1.25 * p
    assert len(bf) == pytest.approx(bf.count, rel=0.03)


def test_growth_is_triggered_by_the_exact_count():
    bf = BloomFilter(1000, 0.01, growth=3)
    keys = [f"k{i}" for i in range(5000)]
    bf.add_many(keys[:1000])
    if bf.count < 1000:  # false positives inside the batch were not counted as new
        bf.add_many(keys[1000:1000 + 1000 - bf.count])
    assert bf.layers == 1
    i = 2000
    while bf.count == 1000:  # the next definitely-new key opens layer 1
        bf.add(keys[i])
        i += 1
    assert bf.layers == 2
    assert bf.layer_table()[0][2] == 1000 and bf.layer_table()[1][2] == 1
    assert bf.layer_table()[1][0] == layer_geometry(1000, 0.01, 3, 1).m
    bf.add_many(keys)
    assert bf.contains_many(keys).all()
    assert bf.layer_table()[1][2] <= 3000


def test_one_batch_spanning_several_layers(monkeypatch):
    monkeypatch.setattr(bloom_mod, "CHUNK", 1 << 20)  # one chunk spills over two layers
    monkeypatch.setattr(layers_mod, "CHUNK", 1 << 20)
    bf = BloomFilter(1000, 0.01)
    keys = [f"k{i}" for i in range(6000)]
    new = bf.add_many(keys)
    table = bf.layer_table()
    assert bf.layers == 3 and [c for _, _, c in table][:2] == [1000, 2000]
    assert new.sum() == bf.count
    assert bf.contains_many(keys).all()


def test_layers_use_independent_positions():
    bf = BloomFilter(10, 0.01)
    bf.add_many([f"k{i}" for i in range(15)])
    assert bf.layers == 2
    h1, h2 = 12345, 678
    a0, a1 = bf._stack.arenas
    assert a0.positions(h1, h2) == sorted(expected_positions(h1, h2, a0.m, a0.k),
                                          key=a0.positions(h1, h2).index)
    assert a1.salt != 0
    assert set(a1.positions(h1, h2)) == expected_positions((h1 + a1.salt) % 2**64, h2,
                                                           a1.m, a1.k)


@given(st.lists(st.text(max_size=12), max_size=400), st.integers(1, 3))
@fast
def test_no_false_negatives_through_growth(keys, growth):
    bf = BloomFilter(7, 0.01, growth=growth)
    half = len(keys) // 2
    bf.add_many(keys[:half])
    for key in keys[half:]:
        bf.add(key)
    assert bf.contains_many(keys).all() and all(k in bf for k in keys)
    if len(set(keys)) > 20:
        assert bf.layers > 1


def test_a_filter_that_cannot_grow_keeps_filling(monkeypatch, caplog):
    monkeypatch.setattr(layers_mod, "MAX_LAYERS", 2)
    bf = BloomFilter(100, 0.01)
    keys = [f"k{i}" for i in range(1000)]
    with caplog.at_level(logging.ERROR, logger="dedup.filter.bloom"):
        bf.add_many(keys[:500])
        bf.add_many(keys[500:])
    assert bf.layers == 2 and bf.layer_table()[1][2] > 200
    assert bf.contains_many(keys).all()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


def test_warns_once_at_80_percent(caplog):
    bf = BloomFilter(1000, 0.01)
    with caplog.at_level(logging.WARNING, logger="dedup.filter.bloom"):
        bf.add_many([f"k{i}" for i in range(790)])
        assert not caplog.records
        bf.add_many([f"k{i}" for i in range(790, 820)])
        bf.add_many([f"k{i}" for i in range(820, 3000)])
        bf.add("another")
    assert len(caplog.records) == 1
    assert "80%" in caplog.records[0].getMessage()


# -- health --------------------------------------------------------------------------------------


def test_len_estimates_the_count():
    bf = BloomFilter(50_000, 0.01)
    bf.add_many(f"u{i}" for i in range(40_000))
    assert len(bf) == pytest.approx(40_000, rel=0.03)


def test_info_fields():
    bf = BloomFilter(2000, 0.01, seed=1234)
    bf.add_many(f"u{i}" for i in range(5000))
    info = bf.info()
    fills = [(bf.layer_bits(j).count(), m, k) for j, (m, k, _) in enumerate(bf.layer_table())]
    bits = sum(m for _, m, _ in fills)
    assert info["layers"] == bf.layers == 2
    assert info["m"] == bf.m and info["k"] == bf.k
    assert info["bits"] == bits and info["bytes"] == bits // 8
    assert info["fill"] == pytest.approx(sum(x for x, _, _ in fills) / bits)
    assert info["expected_fpr"] == pytest.approx(sum((x / m) ** k for x, m, k in fills))
    assert info["estimated_count"] == len(bf) == pytest.approx(5000, rel=0.05)
    assert info["count"] == bf.count == sum(c for _, _, c in bf.layer_table())
    assert (info["capacity"], info["error_rate"], info["seed"], info["growth"]) == (
        2000, 0.01, 1234, 2)


# -- copy, equality, merge -----------------------------------------------------------------------


def test_copy_is_independent():
    a = BloomFilter(1000)
    a.add_many(["x", "y"])
    b = a.copy()
    assert a == b and b.count == 2
    b.add("z")
    assert a != b and "z" not in a


@given(keys_st, keys_st)
@fast
def test_or_equals_the_filter_of_the_union(xs, ys):
    a, b, u = BloomFilter(2000), BloomFilter(2000), BloomFilter(2000)
    a.add_many(xs)
    b.add_many(ys)
    u.add_many(xs + ys)
    merged = a | b
    assert merged == u
    assert merged.count >= max(a.count, b.count)
    a |= b
    assert a == u
    assert a.contains_many(xs + ys).all()


def test_or_of_grown_filters_keeps_every_key():
    a, b = BloomFilter(100), BloomFilter(100)
    xs, ys = [f"x{i}" for i in range(450)], [f"y{i}" for i in range(60)]
    a.add_many(xs)
    b.add_many(ys)
    assert (a.layers, b.layers) == (3, 1)
    for merged in (a | b, b | a):
        assert merged.layers == 3
        assert merged.contains_many(xs + ys).all()


@pytest.mark.parametrize(("other", "field"), [
    ({"capacity": 10_000}, "m differs"),
    ({"seed": 1}, "seed differs"),
    ({"capacity": 1001}, "capacity differs"),       # same m after rounding to 64 bits
    ({"error_rate": 0.01000001}, "error_rate differs"),
    ({"growth": 3}, "growth differs"),
])
def test_merge_refuses_other_geometry_naming_the_field(other, field):
    a = BloomFilter(1000, 0.01)
    b = BloomFilter(**{"capacity": 1000, "error_rate": 0.01, **other})
    if field != "m differs" and field != "seed differs":
        assert (a.m, a.k) == (b.m, b.k)
    with pytest.raises(GeometryMismatch, match=f"^{field}: "):
        a |= b
    with pytest.raises(GeometryMismatch, match=field):
        _ = a | b
    assert a.count == 0


def test_m_mismatch_message():
    a, b = BloomFilter(1000), BloomFilter(10_000)
    with pytest.raises(GeometryMismatch, match=rf"^m differs: {a.m} != {b.m}$"):
        a | b
