"""kill -9 loop: crawl the bundled sample site with --warc, SIGKILL it N times, resume.

    .venv/bin/python bench/reliability.py [--kills 20] [--seed 0] [--pages 400]
        [--hosts 4] [--concurrency 32] [--warc-max-size 100000] [--out FILE]

The WARC output is gzip per record and rotated at ``--warc-max-size`` bytes
(files ``warc/crawl-NNNNN.warc.gz``), so kills also land around rotations.

Why a loop of real processes: exactly-once output and a resumable state dir are
promises about crashes, and only a real SIGKILL of a real ``python -m crawler``
at an arbitrary moment tests them. The site (crawler/demo/site.py) is served by
this process on 127.0.0.1, so it keeps serving while the crawler dies and counts
every request per URL (duplicate fetches are known server-side, not from the
crawler's own account); the set a correct crawl fetches comes from the site's
own link graph (``Site.reachable``), not from a crawl.

Kill moments are drawn from ``--seed``: a third of the kills of ``resume``
and half of those of ``crawl`` (a fresh start is when a state dir is created)
are "early" (uniformly
within 100 ms of the start becoming visible: the state dir appearing for
``crawl``, a file of it changing for ``resume``; interpreter start-up is not
counted, since nothing can go wrong before the process touches its state), the
rest after a random number of further distinct URLs served (spread so that all kills
land before the crawl ends) plus up to 30 ms. After a kill the harness does what
a user would: ``resume DIR`` if DIR exists, else ``crawl`` again. A command that
exits non-zero without being killed is retried once (not killed); if it fails again, and
``crawl`` into the same DIR fails too, the dir is **wedged**: it is counted,
kept aside for inspection, and the crawl starts over in a fresh dir (server
counts and WARC file reset) so that the remaining kills still test something.

Besides the output files, the finished state dir's ledger is weighed against
pages.jsonl: every URL it holds is a seed or was queued by exactly one committed
page, so the records' ``links_new`` must add up to the ledger's URLs minus the
seeds (``links_new_mismatch``) however often the crawl was killed; and ``stats``
must count pages.jsonl: the page counts it shows (responses, failures) and the
ledger's fetched and failed rows each equal the records of that kind
(``stats_mismatch``).

Printed and written (``--out``) as JSON; exit status 1 when any count other than
duplicate fetches is non-zero, when duplicate fetches exceed the in-flight bound
(``concurrency`` per kill: a kill can lose at most the fetches in flight), or
when fewer kills than asked landed before the crawl finished (then the run did
not test what it claims: raise ``--pages``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from reliability_checks import check_pages, check_warc, duplicates

from crawler.core.outputs.output import read_pages
from crawler.core.state.crawlstate import CrawlState
from crawler.demo.serve import RunningSite, serve_site
from crawler.demo.site import SiteSpec
from dedup import UrlSeen, canonicalize

REPO = Path(__file__).resolve().parent.parent
EARLY_WINDOW = 0.1  # seconds after a start becomes visible
RUN_TIMEOUT = 600.0  # one crawl/resume run that takes longer is "hung"


@dataclass
class Options:
    kills: int = 20
    seed: int = 0
    pages: int = 400
    hosts: int = 4
    concurrency: int = 32  # the crawl's own default ([crawl] concurrency)
    max_depth: int = 10
    site_delay: float = 0.005  # server-side seconds per page: keeps fetches in flight
    warc_max_size: int = 100_000  # small: the crawl rotates its WARC files dozens of times


@dataclass
class Run:
    """One child process: what it was, how it ended."""

    cmd: str
    kill: str | None  # "early" / "progress" when one was armed
    killed: bool = False
    rc: int | None = None
    seconds: float = 0.0
    dup_fetches_after: int = 0
    stderr_tail: str = ""


@dataclass
class Loop:
    opts: Options
    running: RunningSite
    work: Path
    rng: random.Random
    runs: list[Run] = field(default_factory=list)
    wedged: list[dict] = field(default_factory=list)
    kills_sent: int = 0
    attempt: int = 0  # bumped when a wedged dir is set aside

    @property
    def state(self) -> Path:
        return self.work / "state"

    @property
    def warc(self) -> Path:
        """The WARC files' directory (``--warc warc/crawl.warc.gz``)."""
        return self.work / "warc"

    def served(self) -> Counter[str]:
        return self.running.total_pages()

    def crawl_args(self) -> list[str]:
        o = self.opts
        return ["crawl", str(self.work / "seeds.txt"), "--state", str(self.state),
                "--warc", str(self.warc / "crawl.warc.gz"),
                "--warc-max-size", str(o.warc_max_size),
                "--allow-private", "--concurrency", str(o.concurrency),
                "--per-host", str(max(1, o.concurrency // 2)), "--delay", "0",
                "--max-depth", str(o.max_depth), "--quiet",
                "--no-sitemaps"]  # the expected set is the site's link graph

    def resume_args(self) -> list[str]:
        return ["resume", str(self.state), "--quiet"]

    # -- one run ------------------------------------------------------------------------

    async def _trigger(self, proc: asyncio.subprocess.Process, kind: str, cmd: str,
                       reachable: int) -> None:
        """Return at the moment the kill of ``kind`` is due (or when ``proc`` ends)."""
        loop = asyncio.get_running_loop()
        if kind == "early":
            before = _listing(self.state)
            while proc.returncode is None:
                now = _listing(self.state)
                if (cmd == "crawl" and self.state.exists()) or (
                        cmd == "resume" and now != before):
                    break
                await asyncio.sleep(0.001)
            await asyncio.sleep(self.rng.uniform(0, EARLY_WINDOW))
            return
        served = self.served()
        remaining = max(1, reachable - len(served))
        left = self.opts.kills - self.kills_sent
        n = self.rng.randint(1, max(1, 2 * remaining // (left + 1)))
        target = len(served) + n  # distinct URLs: refetches after a kill are not progress
        deadline = loop.time() + RUN_TIMEOUT
        while proc.returncode is None and len(self.served()) < target:
            if loop.time() > deadline:
                return
            await asyncio.sleep(0.002)
        await asyncio.sleep(self.rng.uniform(0, 0.03))

    async def run(self, args: list[str], arm: bool, reachable: int) -> Run:
        kind = None
        if arm:
            p_early = 1 / 2 if args[0] == "crawl" else 1 / 3
            kind = "early" if self.rng.random() < p_early else "progress"
        run = Run(args[0], kind)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", *args, cwd=REPO, env=_env(),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        waiter = asyncio.create_task(proc.communicate())
        if kind is not None:
            trigger = asyncio.create_task(self._trigger(proc, kind, args[0], reachable))
            await asyncio.wait({waiter, trigger}, return_when=asyncio.FIRST_COMPLETED)
            trigger.cancel()
            if proc.returncode is None:
                proc.kill()
                run.killed = True
                self.kills_sent += 1
        try:
            _, err = await asyncio.wait_for(waiter, RUN_TIMEOUT)
        except TimeoutError:
            proc.kill()
            _, err = await waiter
            run.stderr_tail = "hung: killed after the run timeout\n"
        run.rc = proc.returncode
        run.seconds = round(time.monotonic() - started, 3)
        run.stderr_tail += err.decode(errors="replace")[-600:]
        run.dup_fetches_after = duplicates(self.served())
        self.runs.append(run)
        return run

    # -- the loop -------------------------------------------------------------------------

    async def until_finished(self, reachable: int) -> bool:
        """Run, kill, resume until a run ends by itself with exit 0; False if it never does."""
        failures = 0
        for _ in range(4 * self.opts.kills + 20):
            args = self.resume_args() if self.state.exists() else self.crawl_args()
            # no kill for a retry: it would hide whether the dir is usable
            arm = self.kills_sent < self.opts.kills and failures == 0
            run = await self.run(args, arm, reachable)
            if run.killed:
                failures = 0
                continue
            if run.rc == 0:
                return True
            failures += 1
            if failures == 1:
                continue  # the same command once more
            if failures == 2 and args[0] == "resume":
                crawl = await self.run(self.crawl_args(), False, reachable)
                if crawl.rc == 0:
                    return True
            self._set_aside(run)
            failures = 0
        return False

    def _set_aside(self, run: Run) -> None:
        """The state dir is wedged: keep it for inspection and start over."""
        self.attempt += 1
        aside = self.work / f"wedged-{self.attempt}"
        aside.mkdir()
        if self.state.exists():
            shutil.move(str(self.state), aside / "state")
        if self.warc.exists():
            shutil.move(str(self.warc), aside / "warc")
        self.wedged.append({"after_kills": self.kills_sent, "dir": str(aside),
                            "last_command": run.cmd, "rc": run.rc,
                            "stderr": run.stderr_tail.strip()[-300:]})
        for log in self.running.logs:
            log.counts.clear()


def _listing(d: Path) -> list[tuple[str, int, int]]:
    try:
        return sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(d))
    except FileNotFoundError:
        return []


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env




async def measure(opts: Options, work: Path) -> dict:
    """The whole loop on a freshly served site; the result as a JSON-able dict."""
    spec = SiteSpec(hosts=opts.hosts, pages=opts.pages, seed=42, trap=True,
                    delay=opts.site_delay)
    started = time.monotonic()
    async with serve_site(spec) as running:
        want = running.site.reachable(max_depth=opts.max_depth)
        reachable = set(want.fetched | want.robots_blocked)
        (work / "seeds.txt").write_text("".join(u + "\n" for u in running.seeds))
        loop = Loop(opts, running, work, random.Random(opts.seed))
        finished = await loop.until_finished(len(want.fetched))
        served = running.total_pages()
    pages = check_pages(loop.state / "pages.jsonl")
    warc = check_warc(loop.warc)
    admitted = _admitted(loop.state) if finished else None
    stats_off = _stats_mismatch(loop.state) if finished else 0
    seeds = len({canonicalize(u) for u in running.seeds})
    lost = pages.lost(reachable)
    dup_fetches = duplicates(served)
    per_kill = _per_kill(loop.runs)
    bound = opts.concurrency * loop.kills_sent
    counts = {
        "lost_urls": len(lost),
        "duplicate_fetches": dup_fetches,
        "duplicate_lines": duplicates(pages.urls),
        "torn_lines": pages.torn_lines,
        "duplicate_warc_records": duplicates(warc.targets),
        "torn_warc_records": warc.torn,
        "unpaired_warc_requests": warc.unpaired,
        # answered pages (a status in pages.jsonl) without a response/revisit record
        "missing_warc_records": len(warc.missing(pages.answered)),
        "wedged_state_dirs": len(loop.wedged),
        # every URL in the ledger is a seed or counted once in its finder's links_new
        "links_new_mismatch": abs(admitted - seeds - pages.links_new) if admitted else 0,
        "stats_mismatch": stats_off,
    }
    problems = [f"{k} = {v}" for k, v in counts.items() if v and k != "duplicate_fetches"]
    if dup_fetches > bound:
        problems.append(f"duplicate_fetches = {dup_fetches} > in-flight bound {bound} "
                        f"({opts.concurrency} per kill x {loop.kills_sent} kills)")
    if not finished:
        problems.append("the crawl never finished")
    if loop.kills_sent < opts.kills:
        problems.append(f"only {loop.kills_sent} of {opts.kills} kills landed before the "
                        "crawl finished (raise --pages)")
    return {
        "options": vars(opts),
        "counts": counts,
        "ok": not problems,
        "problems": problems,
        "kills_sent": loop.kills_sent,
        "kills_early": sum(r.killed and r.kill == "early" for r in loop.runs),
        "in_flight_bound": bound,
        "duplicate_fetches_per_kill_max": max(per_kill, default=0),
        "reachable_urls": len(reachable),
        "pages_lines": pages.lines,
        "admitted_urls": admitted,
        "links_new_sum": pages.links_new,
        "seeds": seeds,
        "unexpected_urls": pages.unexpected(reachable)[:20],
        "lost_sample": lost[:20],
        "warc": warc.to_dict(),
        "wedged": loop.wedged,
        "finished": finished,
        "runs": [vars(r) | {"stderr_tail": r.stderr_tail.strip()[-200:]} for r in loop.runs],
        "seconds": round(time.monotonic() - started, 1),
    }


def _admitted(state: Path) -> int:
    """URLs the ledger holds (admitted, none forgotten): from its kept counters."""
    with UrlSeen(state, readonly=True) as seen:
        return len(seen.ledger)


def _stats_mismatch(state: Path) -> int:
    """How far ``stats`` is from pages.jsonl: its page counts against the records with a
    status (responses) and without (failures; a robots.txt refusal is neither), and the
    ledger's fetched and failed rows against both."""
    answered = failed = 0
    for r in read_pages(state / "pages.jsonl"):
        if r.get("status") is not None:
            answered += 1
        elif r.get("error") != "robots.txt":
            failed += 1
    with CrawlState.stopped(state) as st:
        pages, rows = st.page_counts() or {}, st.counts()
    return (abs(int(pages.get("fetched", 0)) - answered) + abs(int(pages.get("failed", 0)) - failed)
            + abs(rows.get("fetched", 0) + rows.get("failed", 0) - answered - failed))


def _per_kill(runs: list[Run]) -> list[int]:
    """Duplicate fetches that appeared during the run after each kill."""
    out = []
    for before, after in itertools.pairwise(runs):
        if before.killed:
            out.append(after.dup_fetches_after - before.dup_fetches_after)
    return out


def summary(result: dict) -> str:
    c = result["counts"]
    w = result["warc"]
    seq = w["sequential_read"]
    lines = [
        f"kills: {result['kills_sent']} sent ({result['kills_early']} early), "
        f"{len(result['runs'])} runs, {result['seconds']} s; "
        f"{result['reachable_urls']} reachable URLs, {result['pages_lines']} pages.jsonl lines",
        f"lost URLs:               {c['lost_urls']}",
        f"duplicate fetches:       {c['duplicate_fetches']} (bound {result['in_flight_bound']}"
        f"; most after one kill {result['duplicate_fetches_per_kill_max']})",
        f"duplicate pages.jsonl:   {c['duplicate_lines']} (torn lines {c['torn_lines']})",
        f"duplicate WARC records:  {c['duplicate_warc_records']} "
        f"(of {w['page_records']} intact page records in {w['files']} files, "
        f"{w['robots_records']} robots.txt)",
        f"missing WARC records:    {c['missing_warc_records']} "
        f"(unpaired requests {c['unpaired_warc_requests']})",
        f"torn WARC records:       {c['torn_warc_records']} (of {w['records_found']} records; "
        f"one warcio pass reads {seq['intact']} whole of {seq['records']} it yields"
        + ("" if seq["reached_end"] else f", stops: {seq['error']}") + ")",
        f"wedged state dirs:       {c['wedged_state_dirs']}",
        f"stats off pages.jsonl:   {c['stats_mismatch']}",
    ]
    lines.append("OK" if result["ok"] else "FAILED: " + "; ".join(result["problems"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = Options()
    p = argparse.ArgumentParser(prog="bench/reliability.py", description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=defaults.kills, help="SIGKILLs to send "
                   "(default %(default)s)")
    p.add_argument("--seed", type=int, default=defaults.seed,
                   help="seed of the kill moments (default %(default)s)")
    p.add_argument("--pages", type=int, default=defaults.pages,
                   help="pages per host of the sample site (default %(default)s)")
    p.add_argument("--hosts", type=int, default=defaults.hosts,
                   help="hosts of the sample site (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=defaults.concurrency,
                   help="the crawl's fetches in flight (default %(default)s)")
    p.add_argument("--warc-max-size", type=int, default=defaults.warc_max_size,
                   help="the crawl's --warc-max-size (default %(default)s)")
    p.add_argument("--out", type=Path, help="also write the result as JSON to this file")
    p.add_argument("--keep", type=Path, help="work in this new directory and keep it "
                   "(default: a temporary directory, removed)")
    a = p.parse_args(argv)
    if a.kills < 0 or a.pages < 2 or a.hosts < 1 or a.concurrency < 1:
        p.error("need --kills >= 0, --pages >= 2, --hosts >= 1, --concurrency >= 1")
    opts = Options(kills=a.kills, seed=a.seed, pages=a.pages, hosts=a.hosts,
                   concurrency=a.concurrency, warc_max_size=a.warc_max_size)
    if a.keep is not None:
        a.keep.mkdir(parents=True)
        result = asyncio.run(measure(opts, a.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
            result = asyncio.run(measure(opts, Path(tmp)))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    print(summary(result), file=sys.stderr)
    if a.out is not None:  # with every run's command, kill, exit status and stderr tail
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
