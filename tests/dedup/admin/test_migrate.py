"""A state dir written by bloomcrawl 0.1 (ledger format 1) is refused with a one-line
message naming the format, and `bloomcrawl migrate` brings it to format 2 exactly."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict

import pytest

from dedup import CanonRules, Geometry, StateFormatError, UrlSeen, canonicalize, fingerprint
from dedup.admin.migration import V1_BACKUP, migrate
from dedup.store.ledger import State
from tests.support.ledger_v1 import Ledger as LedgerV1

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

URLS = [f"http://h{i % 3}.test/p/{i}" for i in range(300)]


def make_v1(d) -> None:
    d.mkdir()
    with LedgerV1(d / "ledger.sqlite") as led:
        geometry = Geometry(capacity=10_000, error_rate=0.01, shards=4, seed=0, growth=2)
        led.meta_set("geometry", geometry.to_dict())
        rules = asdict(CanonRules())
        rules["strip_params"] = list(rules["strip_params"])
        led.meta_set("canon_rules", rules)
        led.meta_set("crawl_id", "old-crawl")
        rows = [(fingerprint(canonicalize(u), 0), u, u.split("/")[2], 1, State.QUEUED)
                for u in URLS]
        led.insert(rows)
        led.mark_many([(s, State.FETCHED, 200, None) for s in range(1, 101)])
        led.forget([rows[5][0]])  # a gap in the seqs


def test_format1_dir_is_refused_then_migrated_exactly(tmp_path):
    d = tmp_path / "old"
    make_v1(d)
    with pytest.raises(StateFormatError, match=r"format 1.*bloomcrawl migrate"):
        UrlSeen(d)
    assert migrate(d) == 299
    assert (d / V1_BACKUP).is_file()
    with UrlSeen(d, create=False) as seen:
        assert seen.crawl_id == "old-crawl" and seen.damaged_shards == []
        counts = seen.ledger.counts()
        assert (counts["fetched"], counts["queued"]) == (99, 200)
        assert seen.admit(URLS[:5] + URLS[6:]) == []  # every old URL is still seen
        (again,) = seen.admit([URLS[5]])  # the forgotten one counts as new
        assert again.url == URLS[5]
        queued = seen.ledger.queued(1000)
        assert len(queued) == 201 and queued[0].url == URLS[100]
    with pytest.raises(ValueError, match="already format 2"):
        migrate(d)


def test_migrate_cli_and_an_interrupted_migration_resumes(tmp_path):
    d = tmp_path / "old"
    make_v1(d)
    # as if killed after the old ledger was set aside, before the new one took its place
    (d / "ledger.sqlite").rename(d / V1_BACKUP)
    (d / "ledger.v2.partial").write_bytes(b"half a file")
    out = subprocess.run([sys.executable, "-m", "crawler", "migrate", str(d)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "migrated 299 ledger row(s)" in out.stdout
    with UrlSeen(d, create=False) as seen:
        assert seen.admit(URLS[:5]) == []
