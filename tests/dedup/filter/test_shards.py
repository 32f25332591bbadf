"""ShardedBloom: routing by fingerprint, same bits as per-shard filters, merge, files."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dedup.filter.bloom as bloom_mod
import dedup.filter.layers as layers_mod
from dedup.filter.bloom import BloomFilter
from dedup.filter.shards import ShardedBloom, planned_capacity, shard_capacity
from dedup.filter.snapshot import GeometryMismatch, SnapshotError
from dedup.url.fingerprint import fingerprint_many, halves, shard_of

pytestmark = pytest.mark.usefixtures("bit_impl")  # compiled kernel and numpy alike

keys_st = st.lists(st.text(max_size=30), max_size=300)
fast = settings(max_examples=30, deadline=None)


def urls(n: int, prefix: str = "u") -> list[str]:
    return [f"https://example.com/{prefix}/{i}" for i in range(n)]


def route(keys: list[str], nshards: int, seed: int = 0) -> np.ndarray:
    return shard_of(halves(fingerprint_many(keys, seed))[:, 0], nshards)


def test_geometry_and_attributes():
    sb = ShardedBloom(16, 1000, 0.01, seed=11, growth=3)
    assert sb.nshards == 16 and len(sb.shards) == 16
    assert all(isinstance(bf, BloomFilter) for bf in sb.shards)
    assert sb.shard_capacity == 95 == sb.shards[0].capacity  # ceil(62.5 + 4 * sqrt(62.5))
    assert all((bf.seed, bf.growth, bf.error_rate) == (11, 3, 0.01) for bf in sb.shards)
    assert sb.m == BloomFilter(95, 0.01).m


def test_shards_have_headroom_so_none_grows_at_planned_capacity():
    """Keys spread binomially: sized at exactly capacity/S, about half the shards
    would grow a second layer before the filter is full."""
    assert shard_capacity(10_000_000, 64) == 157_832  # 156,250 + 4 * 395.3
    assert shard_capacity(1000, 1) == 1000
    sb = ShardedBloom(64, 200_000)
    sb.add_many(urls(200_000))
    assert sb.layers == 1  # no shard grew
    # the headroom, 4 sigma of a 3,125-key share, costs 7% more bits than one filter
    assert sb.info()["bytes"] <= 1.08 * BloomFilter(200_000).info()["bytes"]


@fast
@given(capacity=st.integers(1, 10**9), shards=st.sampled_from([1, 2, 3, 8, 64, 1024]))
def test_planned_capacity_inverts_shard_capacity(capacity: int, shards: int) -> None:
    """A shard file records only its shard's size: the planned capacity read back
    from it (repair without the ledger's metadata) sizes the shards the same, and
    is the largest capacity that does."""
    shard_cap = shard_capacity(capacity, shards)
    planned = planned_capacity(shard_cap, shards)
    assert planned >= capacity
    assert shard_capacity(planned, shards) == shard_cap < shard_capacity(planned + 1, shards)


@pytest.mark.parametrize("shards", [0, 65537, 2.0])
def test_bad_shard_count(shards):
    with pytest.raises(ValueError, match=r"shards must be an integer in 1\.\.65536"):
        ShardedBloom(shards, 1000)


def test_each_shard_holds_exactly_its_keys_with_the_same_bits_as_a_lone_filter():
    keys = urls(3000)
    sb = ShardedBloom(8, 4000, 0.01)
    assert sb.add_many(keys).all()
    where = route(keys, 8)
    for i, bf in enumerate(sb.shards):
        mine = [k for k, s in zip(keys, where, strict=True) if s == i]
        lone = BloomFilter(shard_capacity(4000, 8), 0.01)
        lone.add_many(mine)
        assert bf == lone  # bit for bit: the shared-storage path equals the plain one
        assert bf.count == len(mine)
        assert bf.contains_many(mine).all()


@given(keys_st)
@fast
def test_no_false_negatives_and_first_occurrence_is_new(keys):
    sb = ShardedBloom(16, 20_000, 0.01)
    seen: set[str] = set()
    want = [not (k in seen or seen.add(k)) for k in keys]
    assert sb.add_many(keys).tolist() == want
    assert sb.contains_many(keys).all()
    assert all(k in sb for k in keys)
    assert sb.count == len(set(keys))


@given(keys_st)
@fast
def test_one_at_a_time_equals_batch(keys):
    """The same bits either way, and the same answers but where a batch's earlier keys
    happen to cover all of a later key's bits: one add at a time answers "maybe" there,
    the batch "new" (it asks the filter as it was before the call; see add_many)."""
    a, b = ShardedBloom(16, 20_000), ShardedBloom(16, 20_000)
    one = [a.add(k) for k in keys]
    batch = b.add_many(keys).tolist()
    assert a == b
    first = [k not in keys[:i] for i, k in enumerate(keys)]
    assert batch == first  # an empty filter: new exactly at a key's first occurrence
    for i, (x, y) in enumerate(zip(one, batch, strict=True)):
        if x != y:  # a false positive of the batch's own keys, met one at a time
            assert y and not x
            before = ShardedBloom(16, 20_000)
            before.add_many(keys[:i])
            assert keys[i] in before


def test_a_key_covered_by_its_batch_is_new_in_the_batch_maybe_one_at_a_time():
    """The empty string's fingerprint is (0, 0): its k probes are one bit, bit 0 of row
    0, which this other key of row 0 sets; the case hypothesis found."""
    keys = ["0", "\U000c5f3f\x10", "", "", ""]
    a, b = ShardedBloom(16, 20_000), ShardedBloom(16, 20_000)
    assert [a.add(k) for k in keys] == [True, True, False, False, False]
    assert b.add_many(keys).tolist() == [True, True, True, False, False]
    assert a == b


def test_hash_path_equals_key_path():
    keys = urls(1000)
    a, b = ShardedBloom(4, 2000, seed=77), ShardedBloom(4, 2000, seed=77)
    a.add_many(keys)
    b.add_hashes(halves(fingerprint_many(keys, 77)))
    assert a == b
    assert b.contains_hashes(halves(fingerprint_many(keys, 77))).all()


@pytest.mark.parametrize("make", [lambda: ShardedBloom(8, 3000, seed=5),
                                  lambda: BloomFilter(3000, seed=5)], ids=["sharded", "single"])
def test_probe_then_add_probed_equals_contains_then_add_hashes(make):
    """The seen-test's path (probe a page, add its new keys from the same probe) builds
    the filter add_hashes builds, bit for bit and count for count, through growth:
    pages of 40 keys, every other key added, to 4x capacity."""
    a, b = make(), make()
    rng = np.random.default_rng(3)
    for page in range(600):
        keys = [f"k{page}-{i}" for i in range(40)] + [f"k{page - 1}-{i}" for i in range(5) if page]
        h = halves(fingerprint_many(keys, 5))
        probed = a.probe_hashes(h)
        assert probed.found.tolist() == b.contains_hashes(h).tolist()
        idx = np.flatnonzero(rng.random(len(keys)) < 0.5)
        a.add_probed(probed, idx)
        b.add_hashes(h[idx])
        assert a.count == b.count
    assert a.layers > 1  # grew: the general path was taken too
    assert a == b


def test_growth_per_shard_keeps_every_key_and_the_fpr(monkeypatch):
    monkeypatch.setattr(bloom_mod, "CHUNK", 1024)
    monkeypatch.setattr(layers_mod, "CHUNK", 1024)
    sb = ShardedBloom(16, 8000, 0.01)
    keys = urls(32_000)
    sb.add_many(keys)
    assert sb.layers >= 3
    assert all(bf.layers >= 2 for bf in sb.shards)
    for bf in sb.shards:  # the exact count filled each full layer to its capacity
        assert bf.layer_table()[0][2] == sb.shard_capacity
    assert sb.contains_many(keys).all()
    fpr = sb.contains_many(urls(200_000, "absent")).mean()
    assert fpr <= 0.0125
    assert len(sb) == pytest.approx(sb.count, rel=0.03)


def test_warns_once_for_the_whole_filter(caplog):
    sb = ShardedBloom(32, 1000)
    with caplog.at_level(logging.WARNING, logger="dedup.filter.bloom"):
        sb.add_many(urls(700))
        assert not caplog.records
        sb.add_many(urls(3000))
    assert len(caplog.records) == 1


def test_info():
    sb = ShardedBloom(8, 8000, 0.01)
    sb.add_many(urls(6000))
    info = sb.info()
    assert info["shards"] == 8 and info["shard_capacity"] == shard_capacity(8000, 8)
    assert info["count"] == sb.count == sum(bf.count for bf in sb.shards) > 5950
    assert info["fill_min"] <= info["fill"] <= info["fill_max"]
    assert info["bits"] == 8 * sb.m and info["bytes"] == sb.m
    assert info["estimated_count"] == len(sb) == pytest.approx(6000, rel=0.03)
    assert info["expected_fpr"] == pytest.approx(
        np.mean([bf.info()["expected_fpr"] for bf in sb.shards]))
    assert info["capacity"] == 8000 and info["shard_capacity"] == shard_capacity(8000, 8)


# -- merge and equality ----------------------------------------------------------------------------


@given(keys_st, keys_st)
@fast
def test_or_equals_the_filter_of_the_union(xs, ys):
    a, b, u = ShardedBloom(8, 4000), ShardedBloom(8, 4000), ShardedBloom(8, 4000)
    a.add_many(xs)
    b.add_many(ys)
    u.add_many(xs + ys)
    assert a | b == u
    a |= b
    assert a == u and a.contains_many(xs + ys).all()


def test_or_refuses_other_geometry():
    with pytest.raises(GeometryMismatch, match=r"^shards differs: 8 != 4"):
        ShardedBloom(8, 4000) | ShardedBloom(4, 4000)
    with pytest.raises(GeometryMismatch, match=r"^seed differs"):
        ShardedBloom(8, 4000) | ShardedBloom(8, 4000, seed=1)


def test_copy_is_independent():
    a = ShardedBloom(4, 100)
    a.add_many(urls(500))
    b = a.copy()
    assert a == b and b.count == a.count and b.layers == a.layers
    b.add("new one")
    assert a != b and "new one" not in a


# -- replacing shards ----------------------------------------------------------------------------


def test_assigning_a_shard_installs_its_bits():
    sb = ShardedBloom(4, 400)
    keys = urls(400)
    mine = [k for k, s in zip(keys, route(keys, 4), strict=True) if s == 2]
    lone = BloomFilter(shard_capacity(400, 4))
    lone.add_many(mine)
    sb.shards[2] = lone
    assert sb.shards[2] is lone and sb.shards[2].count == len(mine)
    assert sb.contains_many(mine).all()
    lone.add(mine[0] + "?more")  # the object now is that shard
    assert sb.shards[2].count == len(mine) + 1


def test_assigning_a_smaller_shard_drops_the_old_layers():
    sb = ShardedBloom(2, 20)
    keys = urls(400)
    sb.add_many(keys)
    assert sb.shards[1].layers >= 3
    sb.shards[1] = BloomFilter(shard_capacity(20, 2))
    assert sb.shards[1].layers == 1 and sb.shards[1].count == 0
    theirs = [k for k, s in zip(keys, route(keys, 2), strict=True) if s == 1]
    assert sb.contains_many(theirs).mean() < 0.05


def test_assigning_a_shard_of_another_sharded_filter_copies_it():
    a, b = ShardedBloom(2, 100), ShardedBloom(2, 100)
    a.add_many(urls(50))
    b.shards[0] = a.shards[0]
    assert b.shards[0] == a.shards[0] and b.shards[0] is not a.shards[0]
    b.add_many(urls(50, "other"))
    assert a.shards[0] != b.shards[0]


def test_shard_list_is_fixed():
    sb = ShardedBloom(2, 100)
    with pytest.raises(GeometryMismatch, match=r"^shard 1: m differs"):
        sb.shards[1] = BloomFilter(1000)
    with pytest.raises(TypeError, match="cannot be added, removed or reordered"):
        sb.shards.append(BloomFilter(50))
    with pytest.raises(TypeError, match="replaced one at a time"):
        sb.shards[0:1] = [BloomFilter(50)]
    with pytest.raises(TypeError, match="cannot be added, removed or reordered"):
        del sb.shards[0]
    with pytest.raises(IndexError, match="out of range"):
        sb.shards[2] = BloomFilter(50)


# -- files ---------------------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path):
    sb = ShardedBloom(8, 1000, 0.01, seed=42)
    keys = urls(2500)
    sb.add_many(keys)
    sb.save(tmp_path / "s", hwm=17, crawl_id="crawl-a")
    names = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert names == [f"shard-{i:05d}.bloom" for i in range(8)]
    assert ShardedBloom.shard_path(tmp_path, 3) == tmp_path / "shard-00003.bloom"
    back = ShardedBloom.load(tmp_path / "s", crawl_id="crawl-a")
    assert back == sb and back.count == sb.count and back.layers == sb.layers
    assert back.contains_many(keys).all()
    assert (back.nshards, back.seed, back.shard_capacity) == (8, 42, sb.shard_capacity)
    back.add_many(urls(100, "more"))  # still a working filter
    assert back.contains_many(keys + urls(100, "more")).all()


def test_load_refuses_mismatched_directories(tmp_path):
    sb = ShardedBloom(4, 400)
    sb.add_many(urls(300))
    sb.save(tmp_path / "s", crawl_id="a")
    with pytest.raises(SnapshotError, match="belongs to crawl 'a', not 'b'"):
        ShardedBloom.load(tmp_path / "s", crawl_id="b")

    swapped = tmp_path / "swapped"
    shutil.copytree(tmp_path / "s", swapped)
    shutil.copy(swapped / "shard-00001.bloom", swapped / "shard-00002.bloom")
    with pytest.raises(SnapshotError, match="holds shard 1, not 2"):
        ShardedBloom.load(swapped)

    missing = tmp_path / "missing"
    shutil.copytree(tmp_path / "s", missing)
    (missing / "shard-00003.bloom").unlink()
    with pytest.raises(SnapshotError, match="missing"):
        ShardedBloom.load(missing)

    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "s", mixed)
    ShardedBloom(4, 400, seed=9).save(tmp_path / "other")
    shutil.copy(tmp_path / "other" / "shard-00002.bloom", mixed / "shard-00002.bloom")
    with pytest.raises(GeometryMismatch, match=r"shard-00002\.bloom: seed differs"):
        ShardedBloom.load(mixed)

    with pytest.raises(SnapshotError, match=r"no shard-00000\.bloom"):
        ShardedBloom.load(tmp_path / "nowhere")
