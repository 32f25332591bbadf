"""URL-seen at scale: UrlSeen vs three peers on one crawl-like stream, per window.

Why: issue 10's targets are about what happens
as the seen-set grows to 10M, 100M URLs: links per CPU-second against plain
SQLite and a RAM set, no decay with size, bounded RSS, bytes of state and of
disk writes per URL, a cold page cache, and O(1) stats and restart. This runs
each implementation in its own process (``scale_run.py``) on the same seeded
stream (``crawlstream.py``), asserts they all count the same distinct URLs,
and prints one row per window of distinct URLs and the ratios the targets need.

Implementations (``--impl``, comma-separated; default all):

* ``urlseen``: ``UrlSeen(dir).filter_new_pages(group)`` with group commit every
  100 pages (``--feed page``: ``filter_new(hrefs, base_url=page)`` per page, ``--feed
  url``: ``add(href, page)`` per link, as a plain caller, no ``commit()`` until the
  end), ``snapshot()`` every ``--snapshot-every`` new URLs and at the end;
* ``sqlite``: peer (a), canonicalize + fingerprint + SQLite INSERT OR IGNORE;
* ``set``: peer (b), canonicalize + fingerprint + a Python set;
* ``scrapy``: peer (c), urljoin + w3lib canonicalize_url + sha1 + set.

``--cold`` adds runs of ``urlseen`` and ``sqlite`` that drop their files from the
page cache (``posix_fadvise DONTNEED``) every 100 pages; compare them on wall
time (a cold cache costs waiting, not CPU).

    .venv/bin/python bench/scale.py --distinct 10000000 --cold --out scale.json
    .venv/bin/python bench/scale.py --quick            # 1M distinct URLs
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import machine, markdown, source_version
from scale_impls import COLD_IMPLS, IMPLS
from scale_report import report_tables

HERE = Path(__file__).resolve().parent


def snapshot_every_default() -> int:
    """The crawler's snapshot cadence (``[snapshot] every_new_urls``), so UrlSeen is
    measured doing what a crawl does."""
    try:
        with open(HERE.parent / "config" / "default.toml", "rb") as f:
            return int(tomllib.load(f)["snapshot"]["every_new_urls"])
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return 100_000


def worker(args: list[str], log_prefix: str) -> dict[str, Any]:
    """Run scale_run.py, echo its windows as they come, return its final result."""
    cmd = [sys.executable, str(HERE / "scale_run.py"), *args]
    result = None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=HERE.parent) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("W "):
                w = json.loads(line[2:])
                print(f"  {log_prefix}: {w['distinct']:,} distinct, {w['links_per_cpu_s']:,.0f} "
                      f"links/CPU-s, RSS {w['vmrss']:.0f} MB", flush=True)
            elif line.startswith("R "):
                result = json.loads(line[2:])
            else:
                print(f"  {log_prefix}: {line.rstrip()}", flush=True)
    if proc.returncode or result is None:
        raise SystemExit(f"{log_prefix}: {' '.join(cmd)} failed (exit {proc.returncode})")
    return result


def timed_cli(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=HERE.parent, timeout=3600)
    return time.perf_counter() - t0


def restart_figures(state: Path) -> dict[str, float]:
    """``bloomcrawl stats DIR`` and a reopen of UrlSeen on the final state, plus the
    interpreter's own start-up (``python -c pass``) to read them against."""
    py = sys.executable
    out = {"python_startup_s": timed_cli([py, "-c", "import dedup, crawler.cli"]),
           "stats_cli_s": timed_cli([py, "-m", "crawler", "stats", str(state)])}
    out.update({f"reopen_{k}": v for k, v in
                worker(["reopen", str(state)], "reopen").items()})
    return out


def write_out(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """Write ``--out`` atomically (a reader never sees half a file)."""
    saved = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
             "machine": machine(), "source": source_version(), **figures}
    tmp = args.out.with_name(args.out.name + ".part")
    tmp.write_text(json.dumps(saved, indent=1))
    tmp.replace(args.out)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distinct", type=int, default=2_000_000,
                    help="stop each run at the first 100-page group reaching this many "
                    "distinct URLs (make bench-scale: 10M)")
    ap.add_argument("--quick", action="store_true", help="--distinct 1000000")
    ap.add_argument("--impl", default=",".join(IMPLS),
                    help=f"comma-separated subset of {','.join(IMPLS)}")
    ap.add_argument("--cold", action="store_true",
                    help=f"also cold-cache runs of {' and '.join(COLD_IMPLS)}")
    ap.add_argument("--window", type=int, default=500_000, help="distinct URLs per window")
    ap.add_argument("--out", type=Path, help="write every figure as JSON here")
    ap.add_argument("--report", type=Path, metavar="JSON",
                    help="run nothing: print the tables of a run saved with --out")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at once (1 on a shared machine: they compete for 2 cores)")
    ap.add_argument("--workdir", type=Path, help="where state goes (default: a temp dir, "
                    "removed at the end)")
    ap.add_argument("--snapshot-every", type=int, default=snapshot_every_default())
    ap.add_argument("--capacity", type=int, default=None,
                    help="UrlSeen's planned capacity, as a crawl planned for this many URLs "
                         "sets it (default: the library's, 10M); the peers have none")
    ap.add_argument("--feed", choices=("group", "page", "url"), default="group",
                    help="each 100-page group in one call where an implementation batches "
                         "(UrlSeen.filter_new_pages with group commit, one executemany, one "
                         "set update); one call per page (UrlSeen(dir).filter_new as a plain "
                         "caller makes it, no commit() until the end); or UrlSeen.add per "
                         "link (the peers: per page)")
    ap.add_argument("--group", type=int, default=100,
                    help="pages per group commit, and per call with --feed group (the "
                         "crawler's groups are the pages that finish during one commit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=20_000)
    ap.add_argument("--zipf", type=float, default=1.0)
    args = ap.parse_args()
    if args.quick:
        args.distinct = 1_000_000
    args.impls = [k.strip() for k in args.impl.split(",") if k.strip()]
    unknown = [k for k in args.impls if k not in IMPLS]
    if unknown or not args.impls:
        ap.error(f"--impl: unknown {unknown}; choose from {', '.join(IMPLS)}")
    if args.distinct < 1 or args.window < 1 or args.jobs < 1 or args.group < 1:
        ap.error("--distinct, --window, --jobs and --group must be positive")
    return args


def reprint(path: Path) -> None:
    saved = json.loads(path.read_text())
    args = argparse.Namespace(window=saved["args"]["window"])
    if not saved.get("complete", True):
        print(f"{path}: an unfinished run; the runs that finished:\n")
    tables, _ = report_tables(saved["runs"], saved.get("restart", {}), args)
    for t in tables:
        print(markdown(t), end="\n\n")


def main() -> None:
    args = parse_args()
    if args.report:
        reprint(args.report)
        return
    runs = [(k, False) for k in args.impls]
    if args.cold:
        runs += [(k, True) for k in args.impls if k in COLD_IMPLS]
    common = ["--distinct", str(args.distinct), "--window", str(args.window),
              "--snapshot-every", str(args.snapshot_every), "--seed", str(args.seed),
              "--hosts", str(args.hosts), "--zipf", str(args.zipf), "--feed", args.feed,
              "--group", str(args.group),
              *(["--capacity", str(args.capacity)] if args.capacity else [])]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bloomcrawl-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        def one(run: tuple[str, bool]) -> dict[str, Any]:
            key, cold = run
            label = key + (" cold" if cold else "")
            state = workdir / label.replace(" ", "-")
            if state.exists():
                raise SystemExit(f"{state} exists: use an empty --workdir")
            return worker([key, str(state), *common, *(["--cold"] if cold else [])], label)

        done: list[dict[str, Any]] = []
        lock = threading.Lock()  # --jobs > 1: runs finish in worker threads

        def save(run: tuple[str, bool]) -> dict[str, Any]:
            result = one(run)
            with lock:
                done.append(result)
                if args.out:  # a long run that dies later still leaves what finished
                    write_out(args, {"complete": False, "runs": done})
            return result

        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(save, runs))
        counts = {f"{r['impl']}{' cold' if r['cold'] else ''}": (r["distinct"], r["pages"])
                  for r in results}
        print("distinct URLs (pages) counted: " + "; ".join(
            f"{k} {d:,} ({p:,})" for k, (d, p) in counts.items()), flush=True)
        restart = (restart_figures(workdir / "urlseen") if "urlseen" in args.impls else {})
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    tables, ratios = report_tables(results, restart, args)
    for t in tables:
        print(markdown(t), end="\n\n", flush=True)
    if args.out:
        write_out(args, {"complete": True, "seconds": time.perf_counter() - t0,
                         "counts": counts, "ratios": ratios, "restart": restart,
                         "runs": results, "tables": tables})
    if len({c for c in counts.values()}) != 1:
        raise SystemExit(f"FAIL: the implementations counted different numbers of distinct "
                         f"URLs (or pages): {counts}")


if __name__ == "__main__":
    main()
