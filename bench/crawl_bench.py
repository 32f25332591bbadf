"""Crawl macro-benchmark: bloomcrawl vs. a bare aiohttp loop on a local generated site.

Why: the dedup micro-benchmarks say the URL-seen test is cheap; this checks that
the whole crawler (robots.txt, politeness bookkeeping, frontier, ledger group
commits, pages.jsonl, snapshots) keeps up with the fastest crawl loop one can
write with the same client and parser. Target (issue 3): >= 80% of its pages/s.

Setup, all in one run, on one machine:

* **The site**: ``crawler.demo.site`` (default 10 hosts x 2,000 pages, seed 1:
  21,968 URLs to fetch). Hosts are 127.0.0.2..11 on one port (distinct ports on
  127.0.0.1 when those addresses cannot be bound). It is served by a SEPARATE
  process, started once: every response is ``Site.render`` output, rendered once
  and replayed by a minimal keep-alive HTTP/1.1 server (``--server raw``,
  default), so serving costs ~20 us of CPU a request and the client is what is
  measured. ``--server aiohttp`` serves with ``crawler.demo.serve.serve_site`` instead
  (several times more server CPU per request). The machine has 2 cores: the
  server and the crawler compete for them (and other work on the box
  competes too: the load average is recorded per run).
* **bare** (the speed limit), its own subprocess: one ``aiohttp.ClientSession``,
  ``--concurrency`` worker tasks, one ``asyncio.Queue``, fetch (no redirects
  followed: a Location is a link), ``crawler.net.links.extract_links``, the same
  ``dedup.Canonicalizer.resolve_many``, the seed hosts as scope, a Python
  ``set`` for seen; no politeness, no robots.txt (``/private/`` links are
  skipped by a string test so both crawls fetch the same URL set), no
  persistence.
* **ours**: ``python -m crawler crawl SEEDS --state NEW_TMP_DIR --concurrency 64
  --delay 0 --per-host 64 --allow-private --quiet`` with every other setting
  at its default (robots.txt obeyed, 10M-URL / 64-shard filter, SQLite ledger,
  group commit, pages.jsonl, final snapshot).

Figures per run: pages = HTTP responses for site URLs (robots.txt excluded), each
checked equal to ``Site.reachable()``; *wall* pages/s = pages / (process start to
exit), imports and the final snapshot included; *steady* pages/s = the middle
80% of completions over the time they took; CPU ms/page = the process's user +
system time per page; peak RSS = the process's ru_maxrss (``os.wait4``); server
CPU = the server's CPU time during the run. Runs alternate bare/ours (the order
flips each repetition); the medians are the result.

Sitemaps: ours reads none by default (``--sitemaps`` opts in, and then a sitemap
fetch is no pages.jsonl line). A tree from before that read each seed host's
sitemaps by default and recorded its ``/sitemap.xml`` 404 as a line: such lines
are counted apart (``sitemaps``, checked = one a host) and not in ``pages``.

``--aiohttp`` also runs ours, and each ``--against`` tree, with ``[fetch] client =
"aiohttp"`` (a ``--config`` file), as "ours+aiohttp" and "against+aiohttp": the
lean client (the default) and aiohttp side by side.

``--against TREE`` also runs ours from another checkout (``python -m crawler`` with
TREE as the working directory, e.g. a ``git worktree`` of main with its compiled
extensions copied in) as crawler "against", interleaved with the others:
before/after in one run. Repeated, each tree is "against:DIRNAME". ``--variant
NAME=ARGS`` also runs ours with extra ``crawl`` arguments (``--variant
asyncio="--loop asyncio"``). ``--no-bare`` skips the bare loop.

Bytecode: the crawled trees' ``crawler/`` and ``dedup/`` are compiled beforehand
(``compileall``: ``__pycache__`` beside the sources, as an installed package has
it) and the crawlers run without ``PYTHONDONTWRITEBYTECODE``: with it and no
``__pycache__``, each run of ours compiled ~100 modules from source (~0.45 s of
CPU a process, ~0.02 ms a page at 22k pages).

``--profile`` also runs ours once under cProfile and prints the top functions.
``--warc`` also runs ours with ``--warc DIR/crawl.warc.gz`` (request/response
records, gzip per record) in each repetition: the cost of the WARC output.
``--ui`` also runs ours with ``--ui 127.0.0.1:PORT`` and a client polling
``/api/stats`` every second (a thread of this process) in each repetition, ours and
ours+ui back to back (their order flips each repetition): the dashboard's cost, as
the pair's difference in pages/s and CPU ms/page, and as counted inside the crawl
(``crawler.ui.live.COST``, written at exit: the CPU time of the sampler and the
/api/stats requests over the event-loop thread's while the dashboard ran).

    .venv/bin/python bench/crawl_bench.py [--hosts 10 --pages 2000] [--runs 3] [--profile]
    .venv/bin/python bench/crawl_bench.py --quick     # 4 x 300 pages, 1 run each
    .venv/bin/python bench/crawl_bench.py --quick --warc
    .venv/bin/python bench/crawl_bench.py --hosts 10 --pages 1000 --ui
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import emit

from dedup import Canonicalizer

if TYPE_CHECKING:  # imported where used: the bare loop's process does not need aiohttp.web
    from crawler.demo.site import Site, SiteSpec

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
HOST_IPS = [f"127.0.0.{i}" for i in range(2, 256)]
PRIVATE = "/private/"  # robots.txt's only rule on a sitegen host
RUN_TIMEOUT = 600.0
# ``python -m crawler`` with the process's peak RSS (VmHWM) on stderr at exit. Not
# ru_maxrss: Linux carries the parent's high-water mark into a forked child's
# ru_maxrss across exec, so a child would report at least the driver's RSS.
_HWM_MARK = "@@VmHWM_kB "
# With --ui, also the dashboard's own CPU count (crawler.ui.live.COST) as JSON.
_UI_MARK = "@@UI "
_RUN_CRAWLER = (
    "import atexit, json, runpy, sys\n"
    "def _hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    f"            sys.stderr.write('{_HWM_MARK}' + line.split()[1] + '\\n')\n"
    "    ui = sys.modules.get('crawler.ui.live')\n"
    "    if ui is not None:\n"
    f"        sys.stderr.write('{_UI_MARK}' + json.dumps(ui.COST.figures()) + '\\n')\n"
    "atexit.register(_hwm)\n"
    "sys.argv = ['crawler', *sys.argv[1:]]\n"
    "runpy.run_module('crawler', run_name='__main__', alter_sys=True)\n"
)


# -- the server process ------------------------------------------------------------------


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _raw_response(resp: Any) -> bytes:
    """An aiohttp ``web.Response`` (as ``Site.render`` builds it) as HTTP/1.1 bytes."""
    body = resp.body or b""
    head = [f"HTTP/1.1 {resp.status} {_reason(resp.status)}"]
    if body or resp.status < 300 or resp.status >= 400:
        ctype = resp.content_type
        if resp.charset:
            ctype += f"; charset={resp.charset}"
        head.append(f"Content-Type: {ctype}")
    if "Location" in resp.headers:
        head.append(f"Location: {resp.headers['Location']}")
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class _Replay(asyncio.Protocol):
    """Keep-alive HTTP/1.1 for GETs without bodies: each request answered from a cache."""

    def __init__(self, site: Site, h: int, cache: dict[tuple[int, bytes], bytes]) -> None:
        self.site, self.h, self.cache = site, h, cache
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            target = head.split(b"\r\n", 1)[0].split(b" ")[1]
            path = target.split(b"?", 1)[0]
            out = self.cache.get((self.h, path))
            if out is None:
                out = self.cache[(self.h, path)] = _raw_response(
                    self.site.render(self.h, path.decode("latin-1")))
            assert self.transport is not None
            self.transport.write(out)


def _bind(n: int) -> list[socket.socket]:
    """n listening sockets: one port on 127.0.0.2.. (one address per host), else n ports."""
    from crawler.demo.serve import bind_hosts

    try:
        return bind_hosts(HOST_IPS[:n], n)
    except OSError:
        return bind_hosts(None, n)


async def _serve(spec: SiteSpec, kind: str) -> None:
    from crawler.demo.site import Site

    loop = asyncio.get_running_loop()
    if kind == "aiohttp":
        from crawler.demo.serve import serve_site

        try:
            serving = serve_site(spec, ips=HOST_IPS[:spec.hosts])
            running = await serving.__aenter__()
        except OSError:
            serving = serve_site(spec)
            running = await serving.__aenter__()
        origins = running.origins
        print(json.dumps({"origins": origins}), flush=True)
        await loop.run_in_executor(None, sys.stdin.read)  # until the driver closes stdin
        await serving.__aexit__(None, None, None)
        return
    socks = _bind(spec.hosts)
    origins = [f"http://{s.getsockname()[0]}:{s.getsockname()[1]}" for s in socks]
    site = Site(spec, origins)
    cache: dict[tuple[int, bytes], bytes] = {}
    index = {o: h for h, o in enumerate(origins)}
    reach = site.reachable(obey_robots=False)
    for url in reach.fetched:  # render everything up front: runs see the same server
        origin = "/".join(url.split("/", 3)[:3])
        h = index.get(origin)
        if h is not None:
            path = url[len(origin):]
            cache[(h, path.encode())] = _raw_response(site.render(h, path))
    for h in range(spec.hosts):
        cache[(h, b"/robots.txt")] = _raw_response(site.render(h, "/robots.txt"))
    servers = []
    for h, s in enumerate(socks):
        s.listen(1024)
        servers.append(await loop.create_server(
            lambda h=h: _Replay(site, h, cache), sock=s, backlog=1024))
    print(json.dumps({"origins": origins, "cached": len(cache)}), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    for srv in servers:
        srv.close()


# -- the bare loop (its own process) ---------------------------------------------------------


async def _bare(seeds: list[str], concurrency: int) -> dict[str, Any]:
    import aiohttp

    from crawler.net.links import extract_links

    canon = Canonicalizer()
    scope = {u.split("/", 3)[2] for u in seeds}
    seen: set[str] = set()
    queue: asyncio.Queue[str] = asyncio.Queue()
    for s in seeds:
        url, key = canon.resolve(s)
        if key not in seen:
            seen.add(key)
            queue.put_nowait(url)
    done: list[float] = []
    errors = 0
    clock = time.time

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while True:
            url = await queue.get()
            try:
                try:
                    async with session.get(url, allow_redirects=False) as resp:
                        body = await resp.read()
                        status = resp.status
                        location = resp.headers.get("Location")
                        ctype = resp.content_type
                        charset = resp.charset
                except (aiohttp.ClientError, OSError, TimeoutError):
                    errors += 1
                    continue
                done.append(clock())
                if 300 <= status < 400 and location:
                    base, hrefs = url, [location]
                elif ctype == "text/html" and status == 200:
                    base, hrefs = extract_links(body, url, charset=charset)
                else:
                    continue
                for pair in canon.resolve_many(hrefs, base):
                    if pair is None:
                        continue
                    fetch, key = pair
                    if key in seen:
                        continue
                    auth = fetch.split("/", 3)[2]
                    if auth not in scope or fetch[len(auth) + 7:].startswith(PRIVATE):
                        continue
                    seen.add(key)
                    queue.put_nowait(fetch)
            finally:
                queue.task_done()

    t0 = clock()
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
        await queue.join()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"t0": t0, "done": done, "errors": errors, "seen": len(seen)}


# -- measuring -------------------------------------------------------------------------


def _vm_hwm_kb() -> int:
    """This process's peak resident set size (kB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _steady(times: Sequence[float]) -> float:
    """Pages/s over the middle 80% of completions (startup and tail excluded)."""
    ts = sorted(times)
    if len(ts) < 20:
        return float("nan")
    a, b = len(ts) // 10, len(ts) - len(ts) // 10 - 1
    return (b - a) / max(1e-9, ts[b] - ts[a])


def _child_env() -> dict[str, str]:
    """The crawlers' environment: compiled bytecode is read (see _compile_trees)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _compile_trees(trees: Sequence[Path]) -> None:
    """Compile the crawlers' own modules once, before the timed runs."""
    dirs = [str(t / d) for t in trees for d in ("crawler", "dedup", "bench")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], env=_child_env(),
                   stdout=subprocess.DEVNULL, check=False)


def _run(cmd: list[str], server_pid: int, tmp: Path, cwd: Path = ROOT
         ) -> tuple[int, float, dict[str, float], float]:
    """(returncode, wall seconds, CPU and peak RSS of that child, server CPU seconds)."""
    cpu0 = _proc_cpu(server_pid)
    errfile = tmp / "stderr.txt"
    with open(errfile, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err,
                                env=_child_env())
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = errfile.read_text(errors="replace")
    hwm = [int(line.split()[1]) for line in text.splitlines() if line.startswith(_HWM_MARK)]
    ui = [json.loads(line[len(_UI_MARK):]) for line in text.splitlines()
          if line.startswith(_UI_MARK)]
    if proc.returncode != 0:
        sys.stderr.write(f"{' '.join(cmd[-12:])} exited {proc.returncode}:\n{text[-3000:]}\n")
    usage = {"cpu": ru.ru_utime + ru.ru_stime, "maxrss_mb": hwm[-1] / 1024 if hwm else 0.0,
             "ui": ui[-1] if ui else None}
    return proc.returncode, wall, usage, _proc_cpu(server_pid) - cpu0


def _ours_cmd(seeds: Path, state: Path, concurrency: int, py: Sequence[str]) -> list[str]:
    return [*py, "crawl", str(seeds), "--state", str(state),
            "--concurrency", str(concurrency), "--delay", "0", "--per-host", str(concurrency),
            "--allow-private", "--quiet"]


def _iso(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _is_sitemap(url: str) -> bool:
    """A host's /sitemap.xml: what ours asks each seed host for (the site has none)."""
    return url.split("/", 3)[3:] == ["sitemap.xml"]


class _Poller:
    """GET /api/stats every second while a crawl runs (``--ui``): the client the
    dashboard's cost is measured with."""

    def __init__(self, port: int) -> None:
        import threading

        self.url = f"http://127.0.0.1:{port}/api/stats"
        self.ok = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(1.0):
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url, timeout=5) as r:
                json.loads(r.read())
                self.ok += 1

    def __enter__(self) -> _Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_ours(seeds: Path, tmp: Path, concurrency: int, server_pid: int,
             want: frozenset[str], *, warc: bool = False, ui: bool = False, name: str = "ours",
             extra: Sequence[str] = (), tree: Path = ROOT, hosts: int = 0) -> dict[str, Any]:
    state = tmp / f"state-{time.monotonic_ns()}"
    warc_dir = tmp / f"warc-{time.monotonic_ns()}"
    load = os.getloadavg()[0]
    cmd = _ours_cmd(seeds, state, concurrency, [sys.executable, "-c", _RUN_CRAWLER])
    cmd += list(extra)
    if warc:
        cmd += ["--warc", str(warc_dir / "crawl.warc.gz")]
    polls = 0
    if ui:
        port = _bind(1)[0]
        ui_port = port.getsockname()[1]
        port.close()
        cmd += ["--ui", f"127.0.0.1:{ui_port}"]
        with _Poller(ui_port) as poller:
            rc, wall, usage, server_cpu = _run(cmd, server_pid, tmp, cwd=tree)
        polls = poller.ok
    else:
        rc, wall, usage, server_cpu = _run(cmd, server_pid, tmp, cwd=tree)
    records = []
    with open(state / "pages.jsonl", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    sitemaps = [r for r in records if _is_sitemap(r["url"])]
    fetched = [r for r in records if r["status"] is not None and not _is_sitemap(r["url"])]
    key = Canonicalizer().resolve
    got = {key(r["url"])[1] for r in fetched}
    if name == "ours":
        name = "ours+warc" if warc else "ours+ui" if ui else "ours"
    result = _figures(name, rc, wall, usage, server_cpu, load,
                      [_iso(r["fetched_at"]) for r in fetched])
    result["sitemaps"] = len(sitemaps)
    if ui:
        result["ui_polls"] = polls
        cost = usage["ui"] or {}
        result["ui_share"] = cost.get("share", float("nan"))
        result["ui_cpu_ms_per_page"] = 1000 * (cost.get("sample_s", 0.0) + cost.get(
            "serve_s", 0.0)) / max(1, len(fetched))
        result["ui_cost"] = cost
    if warc:
        result["warc_mb"] = sum(f.stat().st_size for f in warc_dir.iterdir()) / 2**20
        shutil.rmtree(warc_dir, ignore_errors=True)
    sitemaps_ok = len(sitemaps) == len({r["url"] for r in sitemaps}) and \
        len(sitemaps) in (0, hosts)  # hosts: a tree that read them by default
    result["check"] = "ok" if got == want and len(fetched) == len(want) and sitemaps_ok \
        else f"MISMATCH: missing {len(want - got)}, extra {len(got - want)}, " \
        f"repeats {len(fetched) - len(got)}, sitemap fetches {len(sitemaps)}"
    result["robots_skipped"] = sum(1 for r in records if r["error"] == "robots.txt")
    result["state_mb"] = sum(f.stat().st_size for f in state.rglob("*") if f.is_file()) / 2**20
    shutil.rmtree(state, ignore_errors=True)
    return result


def run_bare(seeds: Path, tmp: Path, concurrency: int, server_pid: int,
             want: frozenset[str]) -> dict[str, Any]:
    out = tmp / f"bare-{time.monotonic_ns()}.json"
    load = os.getloadavg()[0]
    cmd = [sys.executable, str(THIS), "--_role", "bare", "--_seeds", str(seeds),
           "--_out", str(out), "--concurrency", str(concurrency)]
    rc, wall, usage, server_cpu = _run(cmd, server_pid, tmp)
    data = json.loads(out.read_text())
    out.unlink()
    result = _figures("bare", rc, wall, usage, server_cpu, load, data["done"])
    n = len(data["done"])
    result["check"] = "ok" if n == len(want) and data["seen"] == len(want) and \
        not data["errors"] else f"MISMATCH: {n} responses, {data['seen']} seen, " \
        f"{data['errors']} errors, want {len(want)}"
    return result


def _figures(name: str, rc: int, wall: float, usage: dict[str, float], server_cpu: float,
             load: float, times: list[float]) -> dict[str, Any]:
    n = len(times)
    return {"crawler": name, "returncode": rc, "pages": n, "wall_s": wall,
            "pages_per_s": n / wall, "steady_pages_per_s": _steady(times),
            "cpu_s": usage["cpu"], "cpu_ms_per_page": 1000 * usage["cpu"] / max(1, n),
            "peak_rss_mb": usage["maxrss_mb"], "server_cpu_s": server_cpu, "load1": load}


def profile_ours(seeds: Path, tmp: Path, concurrency: int, top: int) -> list[list[Any]]:
    """Run ours once under cProfile; rows of the top functions by own time."""
    state = tmp / "state-profile"
    prof = tmp / "ours.prof"
    cmd = _ours_cmd(seeds, state, concurrency,
                    [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "crawler"])
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, timeout=RUN_TIMEOUT)
    st = pstats.Stats(str(prof), stream=io.StringIO())
    total = st.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_, nc, tt, ct, _) in sorted(
            st.stats.items(), key=lambda kv: -kv[1][2])[:top]:  # type: ignore[attr-defined]
        where = file.replace(str(ROOT) + "/", "").replace(sys.prefix + "/", "")
        where = where.split("site-packages/", 1)[-1]
        rows.append([f"{where}:{line}({func})", nc, round(tt, 3), round(100 * tt / total, 1),
                     round(ct, 3)])
    shutil.rmtree(state, ignore_errors=True)
    return rows


# -- the driver ------------------------------------------------------------------------------


@contextlib.contextmanager
def server_process(spec: SiteSpec, kind: str):  # type: ignore[no-untyped-def]
    cmd = [sys.executable, str(THIS), "--_role", "server", "--hosts", str(spec.hosts),
           "--pages", str(spec.pages), "--seed", str(spec.seed), "--server", kind]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the site server did not start")
        yield proc, json.loads(line)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _median_row(name: str, runs: list[dict[str, Any]]) -> list[Any]:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return [name, len(runs), med("pages"), med("pages_per_s"), med("steady_pages_per_s"),
            med("cpu_ms_per_page"), med("peak_rss_mb"), med("server_cpu_s")]


def _paired(ours: list[dict[str, Any]], uis: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per repetition, ours+ui against ours of the same repetition (run back to back):
    % change of pages/s (negative: slower) and of CPU ms/page (positive: costlier)."""
    by_run = {r["run"]: r for r in ours}
    out: dict[str, list[float]] = {"pps": [], "cpu": []}
    for u in uis:
        o = by_run.get(u["run"])
        if o is not None:
            out["pps"].append(100 * (u["pages_per_s"] / o["pages_per_s"] - 1))
            out["cpu"].append(100 * (u["cpu_ms_per_page"] / o["cpu_ms_per_page"] - 1))
    return out


def _spread(values: list[float], sign: str = "+") -> str:
    """``median % (min, max, n)`` of percentages."""
    if not values:
        return "n/a"
    v = sorted(values)
    return (f"median {statistics.median(v):{sign}.2f}% (min {v[0]:{sign}.2f}, "
            f"max {v[-1]:{sign}.2f}, n={len(v)})")


def drive(args: argparse.Namespace) -> dict[str, Any]:
    from crawler.demo.site import Site, SiteSpec

    spec = SiteSpec(hosts=args.hosts, pages=args.pages, seed=args.seed)
    with server_process(spec, args.server) as (server, info), \
            tempfile.TemporaryDirectory(prefix="crawl-bench-") as tmpdir:
        tmp = Path(tmpdir)
        origins = info["origins"]
        site = Site(spec, origins)
        reach = site.reachable()
        want = reach.fetched
        seeds = tmp / "seeds.txt"
        seeds.write_text("".join(o + "/\n" for o in origins))
        print(f"site: {spec.hosts} hosts x {spec.pages} pages at {origins[0]} .. "
              f"{origins[-1]} ({args.server} server, pid {server.pid}); {len(want)} URLs "
              f"to fetch, {len(reach.robots_blocked)} disallowed by robots.txt", flush=True)
        runs: list[dict[str, Any]] = []
        variants: dict[str, tuple[list[str], Path]] = {"ours": ([], ROOT)}
        for tree in args.against:  # "against", or "against:DIR" when there are several
            vname = "against" if len(args.against) == 1 else f"against:{Path(tree).name}"
            variants[vname] = ([], Path(tree).resolve())
        for v in args.variant:
            vname, _, vargs = v.partition("=")
            variants[vname] = (vargs.split(), ROOT)
        if args.aiohttp:  # each tree again with every request through aiohttp
            conf = tmp / "client-aiohttp.toml"
            conf.write_text('[fetch]\nclient = "aiohttp"\n')
            for vname, (vargs, tree) in list(variants.items()):
                if not vargs:
                    variants[f"{vname}+aiohttp"] = (["--config", str(conf)], tree)
        names = ([] if args.no_bare else ["bare"]) + list(variants)
        if args.ui:  # next to ours: the pair's order flips with the rest
            names.insert(names.index("ours") + 1, "ours+ui")
        _compile_trees(sorted({tree for _, tree in variants.values()}))
        if args.ui:
            variants["ours+ui"] = ([], ROOT)
        for i in range(args.runs):
            order = tuple(names) if i % 2 == 0 else tuple(reversed(names))
            if args.warc:
                order += ("ours+warc",)
            for who in order:
                if who == "bare":
                    r = run_bare(seeds, tmp, args.concurrency, server.pid, want)
                else:
                    extra, tree = variants.get(who, ([], ROOT))
                    r = run_ours(seeds, tmp, args.concurrency, server.pid, want,
                                 warc=who == "ours+warc", ui=who == "ours+ui", name=who,
                                 extra=extra, tree=tree, hosts=spec.hosts)
                r["run"] = i + 1
                runs.append(r)
                print(f"  run {i + 1} {who}: {r['pages']} pages in {r['wall_s']:.2f} s = "
                      f"{r['pages_per_s']:.0f}/s (steady {r['steady_pages_per_s']:.0f}/s), "
                      f"{r['cpu_ms_per_page']:.3f} CPU ms/page, RSS {r['peak_rss_mb']:.0f} MB,"
                      f" server CPU {r['server_cpu_s']:.1f} s, load {r['load1']:.2f}, "
                      f"check {r['check']}"
                      + (f", WARC {r['warc_mb']:.1f} MB" if "warc_mb" in r else "")
                      + (f", {r['ui_polls']} polls of /api/stats, dashboard "
                         f"{100 * r['ui_share']:.2f}% of the loop thread's CPU "
                         f"({r['ui_cpu_ms_per_page']:.4f} ms/page)" if "ui_polls" in r else ""),
                      flush=True)
        prof_rows = profile_ours(seeds, tmp, args.concurrency, args.top) if args.profile \
            else []
    bare = [r for r in runs if r["crawler"] == "bare"] or [{"pages_per_s": float("nan"),
                                                            "steady_pages_per_s": float("nan")}]
    ours = [r for r in runs if r["crawler"] == "ours"]
    warcs = [r for r in runs if r["crawler"] == "ours+warc"]
    others = [n for n in names if n not in ("bare", "ours", "ours+ui")]
    uis = [r for r in runs if r["crawler"] == "ours+ui"]
    ratio = statistics.median(r["pages_per_s"] for r in ours) / \
        statistics.median(r["pages_per_s"] for r in bare)
    steady_ratio = statistics.median(r["steady_pages_per_s"] for r in ours) / \
        statistics.median(r["steady_pages_per_s"] for r in bare)
    cols = ["crawler", "runs", "pages", "pages/s (wall)", "pages/s (steady)", "CPU ms/page",
            "peak RSS MB", "server CPU s"]
    notes = [f"Site: sitegen {spec.hosts} hosts x {spec.pages} pages (seed {spec.seed}), "
             f"{len(want)} URLs fetched by each crawl, {args.server} server in its own "
             f"process; concurrency {args.concurrency}, ours with --delay 0 --per-host "
             f"{args.concurrency}, robots.txt obeyed. 2 shared cores: server and crawler "
             "compete.",
             f"ours / bare: {100 * ratio:.0f}% of the bare loop's pages/s (wall), "
             f"{100 * steady_ratio:.0f}% steady-state (target >= 80%)."]
    if uis:
        ui_cost = 1 - statistics.median(r["pages_per_s"] for r in uis) / \
            statistics.median(r["pages_per_s"] for r in ours)
        ui_steady = 1 - statistics.median(r["steady_pages_per_s"] for r in uis) / \
            statistics.median(r["steady_pages_per_s"] for r in ours)
        paired = _paired(ours, uis)
        shares = sorted(100 * r["ui_share"] for r in uis)
        notes.append(f"--ui with /api/stats polled every second: {100 * ui_cost:+.1f}% "
                     f"pages/s (wall), {100 * ui_steady:+.1f}% steady, vs ours without "
                     "(positive: slower; target < 3%); each repetition's pair (ours+ui "
                     f"against the ours run next to it): pages/s {_spread(paired['pps'])}, "
                     f"CPU ms/page {_spread(paired['cpu'])}.")
        notes.append("The dashboard's own CPU (sampler + /api/stats, time.thread_time "
                     f"inside the crawl): {_spread(shares, '')} of the event-loop "
                     "thread's CPU while it ran; "
                     f"{statistics.median(r['ui_cpu_ms_per_page'] for r in uis):.4f} CPU "
                     "ms/page (median).")
    tables = [
        {"title": "Crawl macro-benchmark (medians)", "columns": cols,
         "rows": ([] if args.no_bare else [_median_row("bare aiohttp loop + set", bare)])
         + [_median_row("bloomcrawl", ours)]
         + [_median_row(f"bloomcrawl ({n})", [r for r in runs if r["crawler"] == n])
            for n in others]
         + ([_median_row("bloomcrawl --warc", warcs)] if warcs else [])
         + ([_median_row("bloomcrawl --ui, polled 1/s", uis)] if uis else []), "notes": notes},
        {"title": "All runs", "columns": ["run", "crawler", "pages", "wall s", "pages/s (wall)",
                                          "pages/s (steady)", "CPU ms/page", "peak RSS MB",
                                          "server CPU s", "load1", "check"],
         "rows": [[r["run"], r["crawler"], r["pages"], r["wall_s"], r["pages_per_s"],
                   r["steady_pages_per_s"], r["cpu_ms_per_page"], r["peak_rss_mb"],
                   r["server_cpu_s"], r["load1"], r["check"]] for r in runs]},
    ]
    if prof_rows:
        tables.append({"title": f"cProfile of ours, top {args.top} by own time",
                       "columns": ["function", "calls", "own s", "own %", "cumulative s"],
                       "rows": prof_rows,
                       "notes": ["cProfile slows the run ~2x; shares, not absolute times."]})
    result = {"spec": {"hosts": spec.hosts, "pages": spec.pages, "seed": spec.seed},
              "urls": len(want), "server": args.server, "concurrency": args.concurrency,
              "ratio_wall": ratio, "ratio_steady": steady_ratio, "runs": runs}
    emit(tables, **result)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--pages", type=int, default=2000, help="pages per host")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="repetitions of each crawler")
    ap.add_argument("--server", choices=("raw", "aiohttp"), default="raw")
    ap.add_argument("--profile", action="store_true", help="also profile ours (cProfile)")
    ap.add_argument("--top", type=int, default=25, help="profile rows")
    ap.add_argument("--quick", action="store_true", help="4 hosts x 300 pages, 1 run each")
    ap.add_argument("--warc", action="store_true",
                    help="also run ours with --warc each repetition")
    ap.add_argument("--against", metavar="TREE", action="append", default=[],
                    help="also run ours from this checkout (before/after in one run; "
                    "repeatable: each is named by its directory)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="also run ours with these extra crawl arguments")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare loop")
    ap.add_argument("--aiohttp", action="store_true",
                    help='also run ours (and each --against tree) with [fetch] client = '
                    '"aiohttp", named NAME+aiohttp: both HTTP clients side by side')
    ap.add_argument("--ui", action="store_true",
                    help="also run ours with --ui and a client polling /api/stats every "
                    "second, each repetition")
    ap.add_argument("--_role", choices=("server", "bare"), help=argparse.SUPPRESS)
    ap.add_argument("--_seeds", help=argparse.SUPPRESS)
    ap.add_argument("--_out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._role == "server":
        from crawler.demo.site import SiteSpec

        asyncio.run(_serve(SiteSpec(hosts=args.hosts, pages=args.pages, seed=args.seed),
                           args.server))
        return 0
    if args._role == "bare":
        seeds = Path(args._seeds).read_text().split()
        data = asyncio.run(_bare(seeds, args.concurrency))
        Path(args._out).write_text(json.dumps(data))
        sys.stderr.write(f"{_HWM_MARK}{_vm_hwm_kb()}\n")
        return 0
    if args.quick:
        args.hosts, args.pages, args.runs = 4, 300, 1
    result = drive(args)
    summary = {k: v for k, v in result.items() if k != "runs"}
    summary["runs"] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                       for r in result["runs"]]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
