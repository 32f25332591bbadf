"""The index lookups of "maybe seen" keys alone, warm and cold, page- and group-sized.

Builds a state dir from the scale benchmark's stream (``--pages`` pages, 100 per
``filter_new_pages`` call), then feeds the next ``--record`` pages to a copy of it
twice, page by page and 100 pages a call, recording every batch of keys the
seen-test asks the ledger about. Those batches are then replayed against the
built state, read-only, through ``Ledger.held_among``: warm (best of
``--repeat``) and cold (``POSIX_FADV_DONTNEED`` on the run files every 100 pages,
the scale benchmark's cold variant). Run it with two checkouts' ``PYTHONPATH`` to
compare their lookups on the same batches (``--state`` keeps the built dir).

    python bench/lookup_bench.py --pages 300000 --state /tmp/lookup-state
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from crawlstream import CrawlStream

from dedup import UrlSeen

GROUP = 100


def build(state: Path, pages: int, seed: int) -> None:
    stream = CrawlStream(seed=seed)
    with UrlSeen(state, autocommit=False) as seen:
        for _ in range(pages // GROUP):
            seen.filter_new_pages(stream.chunk(GROUP))
            seen.commit()
        seen.snapshot()


def record(state: Path, pages: int, record_pages: int, seed: int,
           by_page: bool) -> list[np.ndarray]:
    """The key batches the seen-test asks the ledger about, on a scratch copy."""
    stream = CrawlStream(seed=seed)
    for _ in range(pages // GROUP):
        stream.chunk(GROUP)
    batches: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="lookup-rec-") as tmp:
        copy = Path(tmp) / "state"
        shutil.copytree(state, copy)
        with UrlSeen(copy, autocommit=False) as seen:
            ask = seen.ledger.held_among

            def recorded(fps: bytes) -> list[int]:  # the seen-test's lookup of a page
                batches.append(np.frombuffer(fps, dtype="<u8").reshape(-1, 2).copy())
                return ask(fps)

            seen.ledger.held_among = recorded  # type: ignore[method-assign]
            for _ in range(record_pages // GROUP):
                chunk = stream.chunk(GROUP)
                if by_page:
                    for base, hrefs in chunk:
                        seen.filter_new(hrefs, base_url=base)
                else:
                    seen.filter_new_pages(chunk)
                seen.commit()
    return batches


def replay(state: Path, batches: list[np.ndarray], pages: int, per_call_pages: int, *,
           cold: bool, repeat: int) -> tuple[float, float, int]:
    """(wall µs a page, CPU µs a page, keys found): best wall of ``repeat`` passes."""
    runs = sorted((state / "ledger.index").glob("*.fpr"))
    fds = [os.open(p, os.O_RDONLY) for p in runs]
    best = (float("inf"), 0.0, 0)
    try:
        with UrlSeen(state, readonly=True) as seen:
            # a page's lookup is one batch at most (none if nothing was "maybe seen"):
            # DONTNEED every GROUP batches is at least every GROUP pages
            every = max(1, GROUP // per_call_pages)
            for _ in range(repeat):
                found = 0
                wall = cpu = 0.0
                for i, h in enumerate(batches):
                    if cold and i % every == 0:
                        for fd in fds:
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    w, c = time.perf_counter(), time.process_time()
                    found += len(seen.ledger.held_among(h.tobytes()))
                    wall += time.perf_counter() - w
                    cpu += time.process_time() - c
                if wall / pages < best[0]:
                    best = (wall / pages * 1e6, cpu / pages * 1e6, found)
    finally:
        for fd in fds:
            os.close(fd)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=300_000, help="pages fed to build the state")
    ap.add_argument("--record", type=int, default=6_000, help="pages whose lookups are replayed")
    ap.add_argument("--repeat", type=int, default=3, help="warm passes (the best is kept)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--state", type=Path, help="build here, or reuse if it exists")
    args = ap.parse_args()
    tmp = None
    state = args.state
    if state is None:
        tmp = tempfile.TemporaryDirectory(prefix="lookup-state-")
        state = Path(tmp.name) / "state"
    try:
        if not state.exists():
            t = time.perf_counter()
            build(state, args.pages, args.seed)
            print(f"built {state} from {args.pages:,} pages in {time.perf_counter() - t:.0f} s")
        print("| lookups | keys asked a page | cache | keys found | wall µs a page "
              "| CPU µs a page |")
        print("|---|---:|---|---:|---:|---:|")
        for by_page, per_call in ((True, 1), (False, GROUP)):
            batches = record(state, args.pages, args.record, args.seed, by_page)
            keys = sum(map(len, batches)) / args.record
            name = "page by page" if by_page else f"{GROUP} pages a call"
            for cold in (False, True):
                wall, cpu, found = replay(state, batches, args.record, per_call, cold=cold,
                                          repeat=1 if cold else args.repeat)
                print(f"| {name} | {keys:.1f} | {'cold' if cold else 'warm'} | {found:,} "
                      f"| {wall:,.1f} | {cpu:,.1f} |")
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
