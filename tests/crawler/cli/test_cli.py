"""The command line: errors are one line and an exit status; the dedup tools work."""

from __future__ import annotations

import asyncio
import io
import json
import sys

import pytest

from crawler.cli.main import main
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.run.progress import Progress
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.state import create_crawl
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from dedup.filter.shards import ShardedBloom
from tests.support.helpers import cli_env, config_toml, fast_settings, run_cli, write_seeds


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("bloomcrawl: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# -- usage and bad input -------------------------------------------------------------------


@pytest.mark.parametrize("argv, fragment", [
    ([], "required: COMMAND"),
    (["crawl", "seeds.txt"], "--state"),
    (["crawl", "seeds.txt", "--state", "s", "--max-pages", "-1"], "must be >= 0"),
    (["crawl", "seeds.txt", "--state", "s", "--delay", "soon"], "not a number of seconds"),
    (["crawl", "seeds.txt", "--state", "s", "--allow-domain", "*."], "not a domain name"),
    (["explode"], "invalid choice"),
    (["check", "dir"], "required: URL"),
    (["merge", "a"], "-o"),
    (["crawl", "seeds.txt", "--state", "s", "--concurency", "3"],
     "unrecognized arguments: --concurency 3; --concurency: did you mean '--concurrency'?"),
    (["stats", "d", "--jsn"], "did you mean '--json'?"),
])
def test_usage_errors_exit_2_with_one_line(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in one_error_line(err)


def test_help_exits_0(capsys):
    assert main(["crawl", "--help"]) == 0
    assert "--allow-domain" in capsys.readouterr().out


@pytest.fixture
def quick(tmp_path):
    """A config whose crawls end fast without a server: 127.0.0.1 is refused."""
    cfg = tmp_path / "quick.toml"
    cfg.write_text(config_toml(fast_settings(fetch={"allow_private": False})))
    return cfg


def test_bad_seed_lines_are_reported_with_line_numbers_and_skipped(tmp_path, quick, capsys):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# seeds\n\nhttp://127.0.0.1:9/a\nftp://example.com/\n"
                     "http://[::zz]/\nhttp://127.0.0.1:9/b  # trailing comment\n")
    rc = main(["crawl", str(seeds), "--state", str(tmp_path / "s"), "--config", str(quick),
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 3, err  # finished, both seeds given up (refused)
    assert f"{seeds}:4: not an absolute http(s) URL" in err
    assert f"{seeds}:5:" in err
    assert "error" not in err
    with UrlSeen(tmp_path / "s", readonly=True) as seen:
        assert seen.ledger.counts()["failed"] == 2  # both good seeds fetched (refused)


async def test_a_seeds_line_that_is_not_utf8_is_skipped_naming_its_line(tmp_path, site):
    """One Latin-1 byte rejected the whole file ("invalid start byte at byte 244"): now
    it costs its own line, named like any bad line, and the other seeds are crawled."""
    async with site(SiteSpec(hosts=2, pages=8, seed=5)) as running:
        first, second = running.seeds
        seeds = tmp_path / "seeds.txt"
        seeds.write_bytes(b"# caf\xc3\xa9: UTF-8 in a comment\n" + first.encode() + b"\n"
                          b"http://127.0.0.1:9/caf\xe9\n" + second.encode() + b"\n")
        config = tmp_path / "crawl.toml"
        config.write_text(config_toml(fast_settings()))
        state = tmp_path / "s"
        res = await run_cli("crawl", str(seeds), "--state", str(state), "--config", str(config),
                            "--quiet")
        want = running.site.reachable()
    assert res.rc == 0, res.stderr
    assert res.stderr == (f"bloomcrawl: warning: {seeds}:3: not UTF-8 text (byte 0xe9 at "
                          "column 23): b'http://127.0.0.1:9/caf\\xe9' (skipped)\n")
    with UrlSeen(state, readonly=True) as seen:
        keys = {seen.canonicalizer.resolve(r["url"])[1]
                for r in read_pages(state / "pages.jsonl")}
    assert keys == want.fetched | want.robots_blocked


@pytest.mark.parametrize("data, why", [
    (b"\xff\xfeh\x00t", "not UTF-16 text"),  # a lying byte order mark: odd length
    (b"\xe9\n\xe9\n", "no valid URL (2 bad line(s))"),
])
def test_a_seeds_file_with_no_readable_line_is_refused(tmp_path, capsys, data, why):
    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes(data)
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "s")]) == 1
    assert why in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "s").exists()


def test_a_utf16_seeds_file_is_read(tmp_path):
    from crawler.config.scope import read_seeds
    from dedup import Canonicalizer

    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes("http://example.com/é\r\nhttp://example.org/\r\n".encode("utf-16"))
    found, problems = read_seeds(seeds, Canonicalizer())
    assert [url for url, _ in found] == ["http://example.com/%C3%A9", "http://example.org/"]
    assert problems == []


@pytest.mark.parametrize("content", ["", "# nothing\n", "ftp://x\nnot-a-url\n"])
def test_seeds_file_without_a_valid_url_exits_1(tmp_path, capsys, content):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(content)
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "s")]) == 1
    assert "no valid URL" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "s").exists()


def test_missing_seeds_file_exits_1(tmp_path, capsys):
    assert main(["crawl", str(tmp_path / "nope.txt"), "--state", str(tmp_path / "s")]) == 1
    assert "not found" in one_error_line(capsys.readouterr().err)


def test_unwritable_state_dir_exits_1(tmp_path, capsys):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["crawl", str(seeds), "--state", str(blocker / "state")]) == 1
    assert "cannot write state directory" in one_error_line(capsys.readouterr().err)


def test_state_dir_of_another_crawl_is_refused(tmp_path, quick, capsys):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    state = tmp_path / "s"
    assert main(["crawl", str(seeds), "--state", str(state), "--config", str(quick),
                 "--quiet"]) == 3  # its one seed refused: given up
    capsys.readouterr()
    assert main(["crawl", str(seeds), "--state", str(state)]) == 1
    assert "already holds a crawl" in one_error_line(capsys.readouterr().err)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["crawl", str(seeds), "--state", str(other)]) == 1
    assert "not empty" in one_error_line(capsys.readouterr().err)
    assert main(["resume", str(other)]) == 1
    assert "not a bloomcrawl state directory" in one_error_line(capsys.readouterr().err)
    assert main(["resume", str(tmp_path / "missing")]) == 1
    assert "not found" in one_error_line(capsys.readouterr().err)


def test_a_state_dir_in_use_is_refused(tmp_path, quick, capsys):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    state = tmp_path / "s"
    assert main(["crawl", str(seeds), "--state", str(state), "--config", str(quick),
                 "--quiet"]) == 3  # its one seed refused: given up
    capsys.readouterr()
    with UrlSeen(state, create=False):  # as a running crawl would
        assert main(["resume", str(state)]) == 1
        assert "in use by another bloomcrawl process" in one_error_line(
            capsys.readouterr().err)


@pytest.mark.parametrize(("text", "fragment"), [
    ("[fetch]\ntimeout = 3\n", "unknown key 'timeout' in [fetch]"),
    ("[crawl]\nmax_retries = -1\n", "max_retries"),
    ("[crawl]\nretry_rounds = 5\n", "retry_rounds is replaced by [crawl] max_retries"),
    ("[crawl\n", "c.toml"),
    ("[crawl]\nconcurency = 4\n", "unknown key 'concurency' in [crawl]; did you mean "
     "'concurrency'?"),
])
def test_bad_config_file_exits_2_naming_the_key(tmp_path, capsys, text, fragment):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "s"), "--config",
                 str(cfg)]) == 2  # usage or configuration
    assert fragment in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "s").exists()


# -- the dedup tools on a real crawl's state ------------------------------------------------


@pytest.fixture
async def crawled(tmp_path, small_site):
    settings = fast_settings()
    seeds = write_seeds(tmp_path / "seeds.txt", small_site.seeds)
    seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
    try:
        await Engine(seen, settings, scope).run()
    finally:
        seen.close()
    return tmp_path / "state", small_site


async def _imported_by(*args: str) -> tuple[int, bytes, set[str]]:
    """Run ``bloomcrawl ARGS`` in a child: its exit status, stdout, and the modules the
    command imported (not those loaded before it, as `make coverage`'s tracer loads
    tomllib for its own config)."""
    code = ("import json, sys\nbefore = set(sys.modules)\n"
            "from crawler.cli.main import main\nrc = main(sys.argv[1:])\n"
            "sys.stderr.write(json.dumps(sorted(set(sys.modules) - before)))\nsys.exit(rc)\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, env=cli_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    try:
        return proc.returncode or 0, out, set(json.loads(err.decode().splitlines()[-1]))
    except (ValueError, IndexError):
        raise AssertionError(err.decode(errors="replace")) from None


async def test_stats_imports_its_command_only(crawled):
    """``stats`` loads no crawl loop, no HTTP client, no other command: at 10M URLs its
    target is 1 s, of which Python's start-up and imports were 0.45 s."""
    state, _ = crawled
    rc, out, loaded = await _imported_by("stats", str(state))
    assert rc == 0 and b"fetched" in out
    assert {"crawler.cli.inspect", "dedup"} <= loaded
    assert not loaded & {"aiohttp", "asyncio", "aiofiles", "warcio", "yarl",
                         "crawler.core.run.engine", "crawler.core.run.crawl",
                         "crawler.cli.crawl", "crawler.cli.fleet", "crawler.cli.report",
                         "importlib.metadata"}, sorted(loaded)


def test_the_command_line_starts_no_blas_threads():
    """numpy's OpenBLAS would start a spinning thread per core at import (dedup never
    calls BLAS): the command line's process has only its own thread."""
    import subprocess

    env = cli_env()
    env.pop("OPENBLAS_NUM_THREADS", None)  # this process's import of crawler.cli set it
    code = "import os, crawler.cli.main, numpy; print(len(os.listdir('/proc/self/task')))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert int(out) == 1


async def test_crawl_imports_only_what_it_uses(tmp_path, small_site):
    """A single-process ``crawl`` without --warc, --ui, --redis or --config imports no
    WARC writer, dashboard, Redis client, fleet code or TOML parser: each import is
    CPU paid once per run, a share of every page of a short crawl."""
    seeds = write_seeds(tmp_path / "seeds.txt", small_site.seeds)
    rc, _, loaded = await _imported_by("crawl", str(seeds), "--state", str(tmp_path / "s"),
                                       "--allow-private", "--delay", "0", "--max-pages", "5",
                                       "--quiet")
    assert rc == 0
    assert {"crawler.core.run.engine", "crawler.net.fetch"} <= loaded
    unused = {"warcio", "redis", "tomllib", "crawler.ui.live", "crawler.ui.stats",
              "crawler.ui.page", "crawler.fleet.join", "crawler.fleet.launch",
              "crawler.fleet.supervisor", "crawler.fleet.localredis", "crawler.fleet.resize",
              "crawler.wire.protocol", "crawler.wire.relay", "crawler.wire.transport"}
    assert not loaded & unused, sorted(loaded & unused)


async def test_stats_shows_the_ledger_and_the_filter(crawled, capsys):
    state, _ = crawled
    with UrlSeen(state, readonly=True) as seen:
        counts = seen.ledger.counts()
    assert main(["stats", str(state), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert {k: stats[k] for k in counts} == counts
    assert stats["new"] == counts["fetched"] + counts["failed"] + counts["skipped"]
    assert stats["repeats"] > 0 and 0 < stats["fill"] < 1
    assert stats["config"]["politeness"]["delay"] == 0.0
    assert main(["stats", str(state)]) == 0
    text = capsys.readouterr().out
    assert f"{counts['fetched']} fetched" in text and "fill" in text


async def test_check_forget_and_rebuild(crawled, capsys):
    state, running = crawled
    home = running.seeds[0]
    never = running.origins[0] + "/never-linked"
    assert main(["check", str(state), home, never]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "bloom=maybe-seen" in out[0] and "ledger=fetched" in out[0] and "status=200" in out[0]
    assert "bloom=new" in out[1] and "ledger=absent" in out[1]
    assert main(["check", str(state), "mailto:someone@example.com"]) == 1
    assert "rejected" in capsys.readouterr().out

    assert main(["forget", str(state), home]) == 0
    assert "forgot 1 of 1" in capsys.readouterr().out
    main(["check", str(state), home])
    assert "bloom=maybe-seen\tledger=absent" in capsys.readouterr().out  # bits stay set

    shard = ShardedBloom.shard_path(state / "shards", 0)
    shard.write_bytes(b"garbage")
    assert main(["rebuild", str(state)]) == 0
    assert "rebuilt the fingerprint index (" in (out := capsys.readouterr().out)
    assert "and 4 shard file(s)" in out
    loaded = ShardedBloom.load(state / "shards")
    with UrlSeen(state, readonly=True) as seen:
        assert not seen.damaged_shards
        rows = seen.ledger.queued(10)  # nothing queued after a finished crawl
        assert rows == []
        assert seen.canonicalizer.resolve(running.seeds[1])[1] in loaded


def test_merge_ors_shards_of_state_dirs_and_refuses_other_geometry(tmp_path, capsys):
    keys = {"a": [f"http://a.test/{i}" for i in range(50)],
            "b": [f"http://b.test/{i}" for i in range(50)]}
    for name, urls in keys.items():
        with UrlSeen(tmp_path / name, capacity=1000, shards=4) as seen:
            seen.admit(urls)
            seen.snapshot()
    assert main(["merge", "-o", str(tmp_path / "out"), str(tmp_path / "a"),
                 str(tmp_path / "b")]) == 0
    assert "into 4 shard(s)" in capsys.readouterr().out
    merged = ShardedBloom.load(tmp_path / "out")
    assert all(k in merged for k in keys["a"] + keys["b"])

    with UrlSeen(tmp_path / "c", capacity=2000, shards=4) as seen:
        seen.snapshot()
    assert main(["merge", "-o", str(tmp_path / "out2"), str(tmp_path / "a"),
                 str(tmp_path / "c")]) == 1
    assert "differs" in one_error_line(capsys.readouterr().err)
    assert main(["merge", "-o", str(tmp_path / "out3"), str(tmp_path / "nope")]) == 1
    assert "not found" in one_error_line(capsys.readouterr().err)


def test_merge_output_is_new_empty_or_an_earlier_merge_only(tmp_path, capsys):
    for name, host in (("a", "a.test"), ("b", "b.test")):
        with UrlSeen(tmp_path / name, capacity=1000, shards=2) as seen:
            seen.admit([f"http://{host}/x"])
            seen.snapshot()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    shards_before = sorted((tmp_path / "a" / "shards").iterdir())
    before = [f.read_bytes() for f in shards_before]
    assert main(["merge", "-o", a, a, b]) == 1  # a stopped crawl's state dir
    assert "is a crawl's state directory" in one_error_line(capsys.readouterr().err)
    assert [f.read_bytes() for f in sorted((tmp_path / "a" / "shards").iterdir())] == before
    with UrlSeen(tmp_path / "b", capacity=1000, shards=2):  # a live one (lock held)
        assert main(["merge", "-o", b, a]) == 1
    assert "is a crawl's state directory" in one_error_line(capsys.readouterr().err)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["merge", "-o", str(other), a, b]) == 1
    assert "not empty and not an earlier merge" in one_error_line(capsys.readouterr().err)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (empty, tmp_path / "new", tmp_path / "new"):  # the last: an earlier merge's
        assert main(["merge", "-o", str(out), a, b]) == 0, capsys.readouterr().err
        merged = ShardedBloom.load(out)
        assert "http://b.test/x" in merged and "http://a.test/x" in merged
    capsys.readouterr()


def test_forget_and_check_on_a_missing_dir_exit_1(tmp_path, capsys):
    for cmd in ("check", "forget", "stats", "rebuild"):
        argv = [cmd, str(tmp_path / "nope")] + (["http://x.test/"] if cmd in ("check",
                                                                            "forget") else [])
        assert main(argv) == 1
        assert "not found" in one_error_line(capsys.readouterr().err)


async def test_the_installed_entry_point_runs_a_crawl(tmp_path, small_site):
    seeds = write_seeds(tmp_path / "seeds.txt", [*small_site.seeds[:1], "not a url"])
    res = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "s"),
                        "--allow-private", "--delay", "0", "--max-pages", "5",
                        "--concurrency", "4")
    assert res.rc == 0, res.stderr
    assert "seeds.txt:2: not an absolute http(s) URL" in res.stderr
    assert "max pages reached" in res.stderr and "5 pages this run" in res.stderr
    with UrlSeen(tmp_path / "s", readonly=True) as seen:
        assert seen.ledger.counts()["fetched"] == 5
        assert CrawlState(seen.records).settings()["crawl"]["max_pages"] == 5
    again = await run_cli("resume", str(tmp_path / "s"), "--quiet")
    assert again.rc == 0 and again.stderr == ""
    with UrlSeen(tmp_path / "s", readonly=True) as seen:  # max pages is frozen: still 5
        assert seen.ledger.counts()["fetched"] == 5


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


STATUS = {"rate": 12.5, "fetched": 1500, "queued": 20, "in_flight": 3, "hosts": 2,
          "errors": 1, "new": 1520, "repeats": 30000, "false_positives": 2, "fill": 0.0123}


def test_status_line_redraws_in_place_on_a_tty_and_prints_lines_otherwise():
    tty = _Stream(True)
    p = Progress(tty, interval=1.0, plain_interval=10.0)
    p.update(STATUS, now=100.0)
    p.update(STATUS, now=100.5)  # too soon: nothing
    p.update(STATUS, now=101.0)
    text = tty.getvalue()
    assert text.count("\r") == 2 and "\n" not in text
    assert " 12.5/s" in text and "fetched 1.5k" in text and "failed 1" in text
    assert "fill 1.23%" in text and "new 1.5k" in text

    plain = _Stream(False)
    p = Progress(plain, interval=1.0, plain_interval=10.0)
    for t in (100.0, 101.0, 105.0, 110.0):
        p.update(STATUS, now=t)
    assert plain.getvalue().count("\n") == 2 and "\r" not in plain.getvalue()

    quiet = _Stream(True)
    Progress(quiet, enabled=False).update(STATUS, now=1.0)
    assert quiet.getvalue() == ""
