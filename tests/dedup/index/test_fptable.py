"""The compiled buffer table keeps exactly the newest record of every key, like the
sorted buffer's newest-wins merges: under any adds (in order or not, tombstones,
ties), growth, partial takes and lookups, against a dict."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.index import fptable
from dedup.index.sortedkeys import SEQ_MASK, TOMBSTONE, SortedKeys
from dedup.native import compiled
from tests.dedup.conftest import require_kernel


@pytest.fixture(autouse=True)
def _compiled() -> None:
    require_kernel()  # the table exists only compiled (without it the index uses Buffer)

# few distinct keys, skewed (hi 0 or 1): collisions, long probe chains and ties
KEY = st.tuples(st.integers(0, 1), st.integers(0, 60))
RECORD = st.tuples(KEY, st.integers(1, 40), st.booleans())  # key, seq, tombstone
OP = st.one_of(st.tuples(st.just("add"), st.lists(RECORD, min_size=1, max_size=30)),
               st.tuples(st.just("take"), st.integers(0, 45)))
ALL_KEYS = [(h, lo) for h in range(3) for lo in range(62)]


def _put(model: dict[tuple[int, int], int], records: list) -> None:
    for key, seq, tomb in records:  # newest wins; on a tie the later record
        raw = seq | int(TOMBSTONE) if tomb else seq
        if key not in model or seq >= model[key] & int(SEQ_MASK):
            model[key] = raw


def _cols(records: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hi = np.array([k[0] for k, _, _ in records], dtype=np.uint64)
    lo = np.array([k[1] for k, _, _ in records], dtype=np.uint64)
    raw = np.array([s | int(TOMBSTONE) if t else s for _, s, t in records], dtype=np.uint64)
    return hi, lo, raw


def _answers(table: fptable.TableBuffer) -> dict[tuple[int, int], int]:
    hi = np.array([k[0] for k in ALL_KEYS], dtype=np.uint64)
    lo = np.array([k[1] for k in ALL_KEYS], dtype=np.uint64)
    todo = np.ones(len(ALL_KEYS), dtype=np.uint8)
    raw = np.zeros(len(ALL_KEYS), dtype=np.uint64)
    table.find_into(hi, lo, todo, raw)
    batch = {k: int(r) for k, t, r in zip(ALL_KEYS, todo.tolist(), raw, strict=True) if not t}
    hits, miss = table.find_each([(i, h, lo) for i, (h, lo) in enumerate(ALL_KEYS)])
    assert {ALL_KEYS[i]: r for i, r in hits} == batch  # key by key: the same answers
    assert len(hits) + len(miss) == len(ALL_KEYS)
    return batch


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OP, max_size=25))
def test_holds_the_newest_record_of_each_key_like_a_dict(ops: list) -> None:
    table = fptable.TableBuffer()
    model: dict[tuple[int, int], int] = {}
    for op, arg in ops:
        if op == "add":
            table.add(*_cols(arg))
            _put(model, arg)
        else:
            hi, lo, raw = table.take(arg)
            out = {k: r for k, r in model.items() if r & int(SEQ_MASK) <= arg}
            model = {k: r for k, r in model.items() if k not in out}
            got = list(zip(hi.tolist(), lo.tolist(), strict=True))
            assert got == sorted(out)  # sorted by key, one record per key
            assert dict(zip(got, raw.tolist(), strict=True)) == out
            assert table.size == len(model)
        assert table.count == len(model)
        assert _answers(table) == model


def test_grows_past_many_doublings_and_takes_sorted() -> None:
    rng = np.random.default_rng(3)
    n = 200_000
    hi = rng.integers(0, 2**64, n, dtype=np.uint64)
    lo = rng.integers(0, 2**64, n, dtype=np.uint64)
    assert len(fptable.TableBuffer(3 << 18)._tags) == 1 << 20  # sized for a capacity at once
    table = fptable.TableBuffer()
    for a in range(0, n, 7_000):  # a ledger's appends, batch by batch
        table.add_consecutive(hi[a:a + 7_000], lo[a:a + 7_000], a + 1)
    assert table.count == table.size == n
    assert 8 * n <= 7 * len(table._tags) and table.nbytes() == 25 * len(table._tags)
    todo = np.ones(n, dtype=np.uint8)
    raw = np.zeros(n, dtype=np.uint64)
    table.find_into(hi, lo, todo, raw)
    assert not todo.any() and (raw == np.arange(1, n + 1, dtype=np.uint64)).all()
    absent = np.ones(n, dtype=np.uint8)
    table.find_into(hi, lo ^ np.uint64(1), absent, raw)
    assert absent.all()
    out_hi, out_lo, out_seq = table.take(n // 2)
    keys = SortedKeys.build(out_hi, out_lo, out_seq)  # refuses unsorted or repeated keys
    assert keys.count == n // 2 and table.count == n - n // 2
    assert (np.sort(out_seq) == np.arange(1, n // 2 + 1, dtype=np.uint64)).all()


def test_the_compiled_calls_refuse_bad_tables_and_overfilling() -> None:
    slots, tags = np.zeros(3 * 8, dtype=np.uint64), np.zeros(8, dtype=np.uint8)
    one = np.ones(1, dtype=np.uint64)
    with pytest.raises(ValueError, match="2\\*\\*k"):
        compiled.lookup.table_put(slots[:-3], tags[:-1], 0, one, one, one)
    with pytest.raises(ValueError, match="fill up"):
        compiled.lookup.table_put(slots, tags, 7, one, one, one)
    with pytest.raises(ValueError, match="columns"):
        compiled.lookup.table_put(slots, tags, 0, one, np.ones(2, dtype=np.uint64), one)
    with pytest.raises(ValueError, match="one byte a key"):
        compiled.lookup.table_find(slots, tags, one, one, np.ones(2, dtype=np.uint8), one.copy())
    assert compiled.lookup.table_put(slots, tags, 0, one, one, one) == 1
    # a newer record of the same key: kept, and no key added
    assert compiled.lookup.table_put(slots, tags, 1, one, one, one + one) == 0
    todo, raw = np.ones(1, dtype=np.uint8), np.zeros(1, dtype=np.uint64)
    assert compiled.lookup.table_find(slots, tags, one, one, todo, raw) == 1 and raw[0] == 2
