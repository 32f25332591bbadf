"""``bloomcrawl report DIR -o report.html``: one self-contained HTML file with the
dashboard's charts over a whole crawl (or fleet), finished or running.

Why streamed: pages.jsonl is read line by line into ``PageTally`` (counts per
second, status, cause and host), so a report of millions of pages needs memory
for the crawl's seconds and hosts, not its pages. The state dir is read
read-only, as ``bloomcrawl stats`` does, so it is safe next to a running crawl.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crawler.admin.report import state_stats
from crawler.core.outputs.output import PAGES_FILE
from crawler.ui.doc import document, totals_of_workers
from crawler.ui.page import render_page
from crawler.ui.stats import TOP_HOSTS, PageTally, bin_series, storage_sizes
from dedup import atomic_write_bytes

__all__ = ["crawl_report", "write_report"]


def _series(tally: PageTally, queued_end: int, fill_end: float | None,
            estimated_end: int) -> dict[str, Any]:
    """pages/s and bytes/s from the records' times; the frontier's size and the
    filter's fill rebuilt backwards from the final figures (each record says how
    many new URLs its page queued: queued(t) = queued(end) + pages after t - new
    URLs after t; fill taken as proportional to the URLs admitted)."""
    s = bin_series(tally.per_second)
    pages = [round(p * s["bin_s"]) for p in s["pages_per_s"]]
    new = s["links_new"]
    n = len(pages)
    queued: list[float | None] = [0] * n
    admitted: list[float | None] = [0] * n
    q, a = queued_end, estimated_end
    for i in range(n - 1, -1, -1):
        queued[i] = max(0, q)
        admitted[i] = max(0, a)
        q += pages[i] - new[i]
        a -= new[i]
    fill: list[float | None]
    if fill_end is None or not estimated_end:
        fill = [None] * n
    else:
        fill = [fill_end * (x or 0) / estimated_end for x in admitted]
    s["queued"] = queued
    s["fill"] = fill
    s["ledger_bytes"] = [None] * n
    s["index_bytes"] = [None] * n
    return s


def crawl_report(path: str | Path, workers_dirs: list[Path] | None = None) -> dict[str, Any]:
    """The dashboard's document over a whole crawl (state dir ``path``) or a fleet
    (fleet dir ``path`` with its workers' state dirs ``workers_dirs``)."""
    d = Path(path)
    workers: list[dict[str, Any]] = []
    if workers_dirs is not None:
        dirs = workers_dirs
        per = []
        tally = PageTally()
        storage: dict[str, int] = {}
        for i, wd in enumerate(dirs):
            st = state_stats(wd)
            t = PageTally()
            t.feed(Path(wd) / PAGES_FILE)
            tally.merge(t)
            per.append(st)
            for k, v in storage_sizes(wd).items():
                storage[k] = storage.get(k, 0) + v
            workers.append({"worker": i, "outcome": None, "pages_per_s": None,
                            "fetched": int(st.get("fetched") or 0),
                            "failed": int(st.get("failed") or 0),
                            "queued": int(st.get("queued") or 0), "fill": st.get("fill"),
                            "forwarded": 0, "bytes": t.bytes})
        status = totals_of_workers(per)
        status["state_dir"] = str(d)
    else:
        status = state_stats(d)
        tally = PageTally()
        tally.feed(d / PAGES_FILE)
        storage = storage_sizes(d)
    if not status.get("outcome"):
        status["outcome"] = ("finished" if not status.get("queued")
                             else "stopped or running (URLs still queued)")
    series = _series(tally, int(status.get("queued") or 0), status.get("fill"),
                     int(status.get("new") or 0) or tally.links_new)
    span = series["t"][-1] - series["t"][0] + series["bin_s"] if series["t"] else 0
    status["elapsed"] = span
    rows = [{"host": h, "fetched": f, "failed": x, "queued": 0, "held_back": 0}
            for h, f, x in tally.top_hosts(TOP_HOSTS)]
    doc = document(mode="report", status=status, tally=tally, series=series,
                   storage=storage, top_hosts=rows, workers=workers,
                   status_scope="whole crawl",
                   pages_per_s=tally.pages / span if span else 0.0,
                   bytes_per_s=tally.bytes / span if span else 0.0)
    doc["bin_s"] = series["bin_s"]
    doc["title"] = f"bloomcrawl report: {d.resolve().name}"
    return doc


def write_report(path: str | Path, out: str | Path, workers_dirs: list[Path] | None = None
                 ) -> dict[str, Any]:
    """Write the report of ``path`` to ``out`` (temp file, fsync, rename: never half
    written); returns its document."""
    doc = crawl_report(path, workers_dirs)
    atomic_write_bytes(out, render_page(doc, title=doc["title"]).encode())
    return doc
