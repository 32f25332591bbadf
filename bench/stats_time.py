"""``bloomcrawl stats DIR``'s time, whole process, from one or more source trees.

Why whole process and several trees: at 10M URLs the command's own work is a few
tens of milliseconds and Python's start-up and imports are the rest (the target is
1 s), so what is timed is what a user waits for; and on a shared machine only runs
interleaved in one session compare. Each round runs every tree (order flipped each
round) and ``python -c pass`` for the floor; wall and CPU (user + sys, from
``RUSAGE_CHILDREN``) medians; the outputs, text and ``--json``, must be identical
across trees.

    .venv/bin/python bench/stats_time.py STATE_DIR --runs 7
    .venv/bin/python bench/stats_time.py STATE_DIR --tree /tmp/main-tree --tree .

A tree is a checkout with its compiled extensions (``dedup/native/*.so``) and its
bytecode (``python -m compileall crawler dedup``), run as ``python -m crawler`` with
the tree as working directory and ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = "python -c pass"


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, bytes]:
    """(wall s, CPU s, stdout + stderr) of one run of ``cmd``."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {cwd}: exit {done.returncode}\n"
                         f"{done.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout + done.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("state", type=Path, help="a crawl's state directory")
    ap.add_argument("--runs", type=int, default=7, help="rounds (default: 7)")
    ap.add_argument("--tree", type=Path, action="append",
                    help="a source tree to run (repeatable; default: this checkout)")
    args = ap.parse_args()
    trees = [t.resolve() for t in args.tree or [ROOT]]
    names = [str(t) for t in trees]
    times: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in [*names, FLOOR]}
    outputs: dict[tuple[str, bool], bytes] = {}
    load = os.getloadavg()
    for i in range(args.runs):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            for json_out in (False, True):
                cmd = [sys.executable, "-m", "crawler", "stats", str(args.state.resolve())]
                wall, cpu, out = timed(cmd + ["--json"] * json_out, tree)
                outputs.setdefault((str(tree), json_out), out)
                if not json_out:
                    times[str(tree)][0].append(wall)
                    times[str(tree)][1].append(cpu)
        wall, cpu, _ = timed([sys.executable, "-c", "pass"], ROOT)
        times[FLOOR][0].append(wall)
        times[FLOOR][1].append(cpu)
    for name, (walls, cpus) in times.items():
        print(f"{name}: wall median {statistics.median(walls):.3f} s ({min(walls):.3f} to "
              f"{max(walls):.3f}), CPU median {statistics.median(cpus):.3f} s "
              f"({min(cpus):.3f} to {max(cpus):.3f}), {len(walls)} runs")
    for json_out in (False, True):
        same = len({outputs[(n, json_out)] for n in names}) == 1
        print(f"output{' --json' if json_out else ''} identical across trees: {same}")
    print(f"load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
