"""A damaged fingerprint index (a run or its MANIFEST): found when the state dir is
opened, before a single fetch, with the command that fixes it; ``rebuild`` and
``repair`` rebuild it from the journal without touching the ledger, and resume is
exact afterwards (no page fetched or written twice, nothing lost, counters right).

The index is derived from the journal, so nothing is lost by rebuilding it; before,
a damaged run was found only at the crawl's first "maybe seen" lookup (after
fetches), ``stats`` said nothing, ``rebuild`` left the index as it was and
``repair`` reported a healthy ledger as set aside.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from crawler.cli.main import main
from crawler.core.outputs.output import read_pages
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from tests.crawler.core.state.test_resume import setup_crawl
from tests.support.helpers import CliResult, run_cli

SPEC = SiteSpec(hosts=4, pages=30, seed=31, delay=0.0)


def biggest_run(state: Path) -> Path:
    """The biggest run the MANIFEST names (an unlisted one is an orphan, deleted on open)."""
    text = (state / "ledger.index" / "MANIFEST").read_text().split("\n")[0]
    runs = [state / "ledger.index" / name for name in json.loads(text)["runs"]]
    return max(runs, key=lambda p: p.stat().st_size)


def flip(path: Path, start: int, n: int) -> None:
    data = bytearray(path.read_bytes())
    for i in range(start, start + n):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def flip_records(state: Path) -> None:
    run = biggest_run(state)
    flip(run, run.stat().st_size // 2, 64)  # 64 bytes in the middle of the records


def truncate_run(state: Path) -> None:
    run = biggest_run(state)
    with open(run, "rb+") as f:
        f.truncate(run.stat().st_size // 2)


def flip_header(state: Path) -> None:
    flip(biggest_run(state), 16, 8)  # the record count


def flip_manifest(state: Path) -> None:
    manifest = state / "ledger.index" / "MANIFEST"
    flip(manifest, 2, 4)


def drop_run(state: Path) -> None:
    biggest_run(state).unlink()


def keys_of(state: Path) -> Counter:
    with UrlSeen(state, readonly=True) as seen:
        return Counter(seen.canonicalizer.resolve(r["url"])[1]
                       for r in read_pages(state / "pages.jsonl"))


def cli(capsys, *argv: str) -> CliResult:
    """A command that fetches nothing, run in this process (no interpreter start-up)."""
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return CliResult(rc, out, err)


def requests(running) -> int:
    return sum(sum(log.counts.values()) for log in running.logs)  # robots.txt included


@pytest.mark.parametrize(("damage", "fix"), [
    (flip_records, "rebuild"), (flip_records, "repair"), (truncate_run, "rebuild"),
    (flip_header, "repair"), (flip_manifest, "rebuild"), (drop_run, "repair"),
], ids=["records-rebuild", "records-repair", "truncated-rebuild", "header-repair",
        "manifest-rebuild", "missing-run-repair"])
async def test_damaged_index_is_found_at_open_and_rebuilt(tmp_path, site, capsys, damage,
                                                          fix):
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(config), "--max-pages", "60", "--quiet")
        assert first.rc == 0, first.stderr
        before = keys_of(state)
        assert len(before) >= 60
        damage(state)
        ledger_inode = (state / "ledger.sqlite").stat().st_ino
        served = requests(running)
        way_out = f"'bloomcrawl rebuild {state}'"
        if damage is flip_records:  # stats reads headers and sizes only: O(runs)
            quick = cli(capsys, "stats", str(state), "--json")
            assert quick.rc == 0 and json.loads(quick.stdout)["index_damage"] == ""
        for argv in ([["stats", str(state)]] if damage is not flip_records else []) + [
                ["check", str(state), running.seeds[0]],
                ["resume", str(state), "--quiet", "--max-pages", "0"]]:
            refused = (await run_cli(*argv) if argv[0] == "resume"
                       else cli(capsys, *argv))
            assert refused.rc == 1, (argv, refused.stdout, refused.stderr)
            assert way_out in refused.stderr, (argv, refused.stderr)
            assert "ledger.index" in refused.stderr, refused.stderr  # names the file
            assert "Traceback" not in refused.stderr
            assert "bloomcrawl repair" not in refused.stderr  # the ledger is fine
        assert requests(running) == served  # refused before a single fetch

        fixed = cli(capsys, fix, str(state))
        assert fixed.rc == 0, fixed.stderr
        if fix == "rebuild":
            assert "rebuilt the fingerprint index" in fixed.stdout, fixed.stdout
        else:
            assert "every row matches its checksum" in fixed.stdout, fixed.stdout
            assert "kept as it is" in fixed.stdout
            assert "damaged fingerprint index: " in fixed.stdout, fixed.stdout
            assert "rebuilt the fingerprint index from the ledger" in fixed.stdout
            assert "kept the damaged file" not in fixed.stdout
        assert not list(state.glob("ledger.sqlite.*")), list(state.iterdir())
        assert (state / "ledger.sqlite").stat().st_ino == ledger_inode  # not replaced
        index_files = sorted(p.name for p in (state / "ledger.index").iterdir())
        assert "MANIFEST.rebuild" not in index_files and not any(
            n.endswith(".tmp") for n in index_files)

        stats = cli(capsys, "stats", str(state), "--json")
        assert stats.rc == 0, stats.stderr
        assert json.loads(stats.stdout)["index_damage"] == ""
        done = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
        assert done.rc in (0, 3), done.stderr

        after = keys_of(state)
        want = running.site.reachable()
        assert max(after.values()) == 1  # no page written twice
        assert set(after) == want.fetched | want.robots_blocked  # nothing lost
        assert set(before) <= set(after)
        server = running.total_pages()
        assert max(server.values()) == 1, server.most_common(3)  # nothing fetched twice
        assert set(server) == set(want.fetched)
        with UrlSeen(state, readonly=True) as seen:
            counts = seen.ledger.counts()
        assert counts["queued"] == 0
        assert counts["fetched"] + counts["failed"] + counts["skipped"] == len(after)


async def test_repair_of_a_whole_state_dir_changes_nothing(tmp_path, site, capsys):
    async with site(SPEC) as running:
        seeds, config, state = setup_crawl(tmp_path, running)
        first = await run_cli("crawl", str(seeds), "--state", str(state), "--config",
                              str(config), "--max-pages", "40", "--quiet")
        assert first.rc == 0, first.stderr
        files = {p.name: p.stat().st_mtime_ns for p in (state / "ledger.index").iterdir()}
        fixed = cli(capsys, "repair", str(state))
        assert fixed.rc == 0, fixed.stderr
        assert "nothing to repair, nothing changed" in fixed.stdout, fixed.stdout
        assert {p.name: p.stat().st_mtime_ns
                for p in (state / "ledger.index").iterdir()} == files
        assert not list(state.glob("ledger.sqlite.*"))
