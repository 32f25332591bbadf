"""Run the benchmark scripts, save each one's results, print them as markdown.

Each benchmark is a standalone script run as a subprocess (a fresh interpreter,
so one benchmark's memory and caches never skew the next). A script reports
by calling :func:`emit` (``from run import emit``): it prints its tables as
markdown and, when run from here, also writes them as JSON to the path in
``$BENCH_JSON``. Scripts that print plain text instead still run; their output
is kept verbatim. Results land in ``bench/results/NAME.json`` (gitignored).

    .venv/bin/python bench/run.py             # everything (make bench), ~5-10 min
    .venv/bin/python bench/run.py --quick     # small sizes, a smoke run (< 1 min)
    .venv/bin/python bench/run.py --only dedup --only stream

To add a benchmark, append a :class:`Bench` to ``BENCHES``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TIMEOUT = 1200  # seconds per script: a hung benchmark must not hang `make bench`


@dataclass(frozen=True)
class Bench:
    name: str
    script: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)


BENCHES = [
    Bench("dedup", "dedup_bench.py"),
    Bench("stream", "stream.py"),
    Bench("canon_parsers", "canon_parsers.py",
          quick=("--links", "10000", "--repeat", "1", "--pages", "400")),
    Bench("html_parsers", "html_parsers.py", quick=("--pages", "20", "--repeat", "1")),
    Bench("crawl", "crawl_bench.py"),
    Bench("dist", "dist_bench.py"),
    Bench("dup", "dup_bench.py", ("--pages", "1500", "--cap", "12000"),
          quick=("--pages", "600", "--cap", "2000")),
    Bench("scrapy_dupefilter", "scrapy_dupefilter.py",
          ("--requests", "1000000", "--crawl", "--crawl-pages", "300"),
          quick=("--requests", "20000", "--crawl", "--crawl-pages", "50")),
]


# -- the reporting side, used by the benchmark scripts -----------------------------------


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the machine is shared: load average included)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "platform": platform.platform()}


def markdown(table: dict[str, Any]) -> str:
    """A table ``{"title", "columns", "rows", "notes"?}`` as GitHub markdown."""
    cols, rows = table["columns"], table["rows"]
    # numbers right-aligned, text left
    numeric = [bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
               for i in range(len(cols))]
    lines = [f"**{table['title']}**", "", "| " + " | ".join(cols) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    lines += [f"\n{note}" for note in table.get("notes", ())]
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|")


def source_version() -> dict[str, str]:
    """Which code was measured: the git commit, and a hash of the working tree's dedup/
    and crawler/ sources (they may differ from the commit while work is in progress)."""
    root = HERE.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    h = hashlib.sha256()
    for path in sorted([*root.glob("dedup/**/*.py"), *root.glob("crawler/**/*.py")]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return {"commit": commit, "sources_sha256": h.hexdigest()[:16]}


def emit(tables: list[dict[str, Any]], **extra: Any) -> None:
    """Print ``tables`` as markdown; under run.py also write them (and ``extra``) as JSON."""
    for t in tables:
        print(markdown(t), end="\n\n", flush=True)
    out = os.environ.get("BENCH_JSON")
    if out:
        Path(out).write_text(json.dumps({"tables": tables, "machine": machine(),
                                         "source": source_version(), **extra},
                                        indent=1, default=str))


# -- the driver ------------------------------------------------------------------------


def run_one(bench: Bench, quick: bool) -> dict[str, Any]:
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{bench.name}.json"
    tmp = out.with_suffix(".json.part")
    tmp.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / bench.script), *(bench.quick if quick else bench.args)]
    env = dict(os.environ, BENCH_JSON=str(tmp), PYTHONUNBUFFERED="1")
    print(f"\n## {bench.name}: {' '.join(cmd[1:])}\n", flush=True)
    t0 = time.perf_counter()
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, cwd=HERE.parent) as proc:
        killer = threading.Timer(TIMEOUT, proc.kill)  # also ends a script hung without output
        killer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # stream it: a long benchmark shows progress
                print(line, end="", flush=True)
                lines.append(line)
            rc: int | str = proc.wait()
        finally:
            killer.cancel()
    seconds = time.perf_counter() - t0
    if rc != 0 and seconds >= TIMEOUT:
        rc = f"killed after {TIMEOUT} s"
    result: dict[str, Any] = {"name": bench.name, "command": " ".join(cmd[1:]), "quick": quick,
                              "returncode": rc, "seconds": round(seconds, 1)}
    if tmp.exists():
        result.update(json.loads(tmp.read_text()))
        tmp.unlink()
    else:  # a plain-text benchmark: keep what it printed
        result["machine"] = machine()
        result["source"] = source_version()
        result["output"] = "".join(lines)
    out.write_text(json.dumps(result, indent=1, default=str))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="run only this benchmark (repeatable): "
                         + ", ".join(b.name for b in BENCHES))
    args = ap.parse_args()
    names = {b.name for b in BENCHES}
    unknown = set(args.only or ()) - names
    if unknown:
        ap.error(f"unknown benchmark {', '.join(sorted(unknown))}; "
                 f"choose from {', '.join(sorted(names))}")
    chosen = [b for b in BENCHES if not args.only or b.name in args.only]

    results = [run_one(b, args.quick) for b in chosen]

    m = machine()
    print(f"\n# Results ({'quick' if args.quick else 'full'} run)\n")
    print(f"Machine: {m['cpu']}, {m['cores']} cores (shared), Python {m['python']}, "
          f"load average {m['loadavg']}.\n")
    print(markdown({"title": "Benchmarks", "columns": ["benchmark", "status", "seconds",
                                                       "results"],
                    "rows": [[r["name"], "ok" if r["returncode"] == 0 else
                              f"FAILED ({r['returncode']})", r["seconds"],
                              f"bench/results/{r['name']}.json"] for r in results]}))
    for r in results:
        print(f"\n### {r['name']}\n")
        if "tables" in r:
            for t in r["tables"]:
                print(markdown(t), end="\n\n")
        else:
            print("```\n" + r.get("output", "").rstrip() + "\n```")
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
