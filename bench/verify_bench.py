"""What checking a whole ledger at open costs: ``Journal.verify()`` (SQLite's
``PRAGMA quick_check``, then every row read and its CRC-32 checked: what
``bloomcrawl resume`` runs before its first fetch), through the compiled pass
(dedup/native/_rowcrc.c) and through the Python loop, beside ``quick_check`` alone
(page structure only: it does not see a flipped byte inside a row; part of both
verify figures since it runs first) on one ledger of ``--urls`` URLs with their text,
``--per-page`` a page, ``--marked`` of them marked fetched (one outcome row each),
one group commit per ``--commit-every`` pages (journal_bench.py's stream).

    .venv/bin/python bench/verify_bench.py --urls 3000000 --marked 1000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.journal_bench import pages
from dedup.journal.journal import Journal
from dedup.native import compiled
from dedup.store.ledger import State


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--urls", type=int, default=3_000_000)
    ap.add_argument("--marked", type=int, default=1_000_000)
    ap.add_argument("--per-page", type=int, default=10)
    ap.add_argument("--commit-every", type=int, default=100)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "ledger.sqlite"
        t = time.perf_counter()
        with Journal(path, autocommit=False) as j:
            for n, (fps, urls, hosts) in enumerate(pages(args.urls, args.per_page), 1):
                j.append(fps, depth=1, urls=urls, hosts=hosts)
                if n % args.commit_every == 0:
                    j.commit()
            for start in range(1, args.marked + 1, 10_000):
                stop = min(start + 10_000, args.marked + 1)
                j.mark_many([(s, State.FETCHED, 200, None) for s in range(start, stop)])
                j.commit()
        built = time.perf_counter() - t
        size = path.stat().st_size
        with Journal(path, readonly=True) as j:
            t = time.perf_counter()
            rows = j.verify()
            t_verify = time.perf_counter() - t
            rowcrc, compiled.rowcrc = compiled.rowcrc, None
            try:
                t = time.perf_counter()
                assert j.verify() == rows
                t_python = time.perf_counter() - t
            finally:
                compiled.rowcrc = rowcrc
            t = time.perf_counter()
            j._db.execute("PRAGMA quick_check").fetchall()
            t_quick = time.perf_counter() - t
        print(f"urls {args.urls:_} marked {args.marked:_}: ledger {size / 2**20:.0f} MiB, "
              f"{rows:_} rows (built in {built:.0f} s); verify {t_verify:.2f} s "
              f"({t_verify / rows * 1e6:.2f} us a row, {'compiled' if rowcrc else 'Python'}), "
              f"Python loop {t_python:.2f} s ({t_python / rows * 1e6:.2f} us a row), "
              f"quick_check {t_quick:.2f} s")


if __name__ == "__main__":
    main()
