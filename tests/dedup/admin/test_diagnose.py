"""A damaged fingerprint index is found when a writer opens the state dir (not at its
first lookup), ``UrlSeen.rebuild`` replaces it from the journal, and ``diagnose``
tells the damaged part apart: ledger, index or shard files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dedup import IndexDamaged, UrlSeen
from dedup.admin.diagnosis import diagnose, index_damage

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

URLS = [f"http://a.test/p/{i}" for i in range(3000)]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    d = tmp_path / "s"
    with UrlSeen(d, capacity=10_000, shards=4, index_buffer=500) as seen:
        for i in range(0, 2000, 100):
            seen.filter_new(URLS[i:i + 100])
        seen.snapshot()
    return d


def live_runs(d: Path) -> list[Path]:
    """The runs the MANIFEST names (an unlisted one is an orphan, deleted on open)."""
    text = (d / "ledger.index" / "MANIFEST").read_text().split("\n")[0]
    return [d / "ledger.index" / name for name in json.loads(text)["runs"]]


def flip_run(d: Path) -> Path:
    run = max(live_runs(d), key=lambda p: p.stat().st_size)
    data = bytearray(run.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit: order may well survive it, the CRC does not
    run.write_bytes(bytes(data))
    return run


def test_a_writer_refuses_a_damaged_index_at_open_and_rebuild_fixes_it(state: Path) -> None:
    assert diagnose(state).derived_damaged is False
    run = flip_run(state)
    with pytest.raises(IndexDamaged, match=f"{run.name}: record checksum mismatch"):
        UrlSeen(state, create=False)
    # a reader opens it at its first lookup
    with UrlSeen(state, readonly=True) as seen, pytest.raises(IndexDamaged, match=run.name):
        seen.check(URLS[0])
    found = diagnose(state)
    assert not found.ledger_damaged and run.name in found.index and found.shards == []
    assert run.name in index_damage(state)
    UrlSeen.rebuild(state).close()
    assert diagnose(state).derived_damaged is False
    with UrlSeen(state, create=False) as seen:
        assert seen.filter_new(URLS[:2500]) == URLS[2000:2500]  # exact both ways


def test_diagnose_names_damaged_shards_and_a_damaged_ledger(state: Path) -> None:
    shard = state / "shards" / "shard-00002.bloom"
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    found = diagnose(state)
    assert not found.ledger_damaged and not found.index
    assert len(found.shards) == 1 and shard.name in found.shards[0]
    UrlSeen.rebuild(state, index=False).close()
    assert diagnose(state).shards == []

    db = state / "ledger.sqlite"
    data = bytearray(db.read_bytes())
    for i in range(4096 + 100, len(data) - 100, 3):
        data[i] ^= 0xA5
    db.write_bytes(bytes(data))
    found = diagnose(state)
    assert found.ledger_damaged and str(db) in found.ledger


def test_the_quick_check_finds_a_cut_run_not_a_flipped_record(state: Path) -> None:
    """``index_damage(records=False)`` (``bloomcrawl stats``) reads each run's header
    and size only: a truncated run is reported, a flipped record byte is left to the
    full check (``diagnose``, a writer's open, ``rebuild``, ``repair``)."""
    assert index_damage(state, records=False) == ""
    run = flip_run(state)
    assert index_damage(state, records=False) == ""
    assert run.name in index_damage(state)
    with open(run, "rb+") as f:
        f.truncate(run.stat().st_size - 24)  # one record short of what the header says
    damage = index_damage(state, records=False)
    assert run.name in damage and "truncated or damaged" in damage

