"""Tables and target ratios from scale.py's runs (pure: results in, tables out).

The targets are issue 10's; each row says the
figure, the target and whether this run met it, so a rerun after the storage
rewrite reads off directly.
"""

from __future__ import annotations

import argparse
from typing import Any

MB = 1_000_000


def _label(run: dict[str, Any]) -> str:
    return run["name"] + (", cold cache" if run["cold"] else "")


def _span(windows: list[dict[str, Any]]) -> dict[str, float]:
    links = sum(w["links"] for w in windows)
    cpu = sum(w["cpu_s"] for w in windows)
    wall = sum(w["wall_s"] for w in windows)
    new = sum(w["new"] for w in windows)
    return {"links_per_cpu_s": links / cpu if cpu else 0.0,
            "links_per_s": links / wall if wall else 0.0,
            "written_b_per_new": sum(w["write_bytes"] for w in windows) / new if new else 0.0,
            # None for runs recorded before snapshot writes were counted apart
            "snapshot_b_per_new": (sum(w["snapshot_write_bytes"] for w in windows) / new
                                   if new and all("snapshot_write_bytes" in w for w in windows)
                                   else None),
            "gen_cpu_s": sum(w["gen_cpu_s"] for w in windows), "cpu_s": cpu,
            "pages": sum(w["pages"] for w in windows)}


def _nominal(windows: list[dict[str, Any]], size: int) -> list[tuple[int, int]]:
    """Each window's nominal [start, end) in distinct URLs (the edge it closed at)."""
    out, start = [], 0
    for i, w in enumerate(windows):
        end = w["distinct"] if i == len(windows) - 1 else w["distinct"] // size * size
        out.append((start, end))
        start = end
    return out


def _fmt_range(a: int, b: int) -> str:
    return f"{a / MB:g}M–{b / MB:g}M" if b >= MB else f"{a:,}–{b:,}"


def window_table(runs: list[dict[str, Any]], size: int) -> dict[str, Any]:
    keyed = []
    for run in runs:
        for (a, b), w in zip(_nominal(run["windows"], size), run["windows"], strict=True):
            keyed.append((a, [_fmt_range(a, b), _label(run), w["links_per_cpu_s"], w["links_per_s"],
                         w["vmrss"], w["vmhwm"], w.get("peak_anon"), w["state_b_per_url"],
                          w["written_b_per_new"],
                          w["read_b_per_page"]]))
    keyed.sort(key=lambda kr: kr[0])  # by window; stable, so runs keep their order
    rows = [r for _, r in keyed]
    return {"title": "Per window of distinct URLs",
            "columns": ["window (distinct URLs)", "implementation", "links/CPU-s", "links/s (wall)",
                        "RSS MB", "peak RSS MB", "peak anon MB", "state B/URL",
                        "B written/new URL", "B read/page"], "rows": rows,
            "notes": ["links = raw hrefs fed (75 a page, incl. rejected ones); CPU = the "
                      "process's user+sys time in the timed region (stream generation "
                      "excluded); state = blocks allocated by every state file (WAL included), "
                      "per distinct URL so far; written/read = /proc/self/io write_bytes / "
                      "read_bytes of the process over the window; RSS includes run-file "
                      "pages mapped from the page cache (RssFile), anon is RssAnon "
                      "sampled every 100 pages."]}


def _peak_anon(run: dict[str, Any]) -> float | None:
    peaks = [w.get("peak_anon") for w in run["windows"]]
    return max(peaks) if None not in peaks else None  # older saved runs lack it


def summary_table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for run in runs:
        s, last = _span(run["windows"]), run["windows"][-1]
        rows.append([_label(run), run["distinct"], run["pages"], s["links_per_cpu_s"],
                     s["links_per_s"], max(w["vmhwm"] for w in run["windows"]),
                     _peak_anon(run),
                     last["state_b_per_url"], s["written_b_per_new"],
                     s["snapshot_b_per_new"] if run["impl"] == "urlseen" else None,
                     s["gen_cpu_s"] / s["pages"] * 1e6, s["gen_cpu_s"] / s["cpu_s"]])
    return {"title": "Whole runs",
            "columns": ["implementation", "distinct URLs", "pages", "links/CPU-s",
                        "links/s (wall)", "peak RSS MB", "peak anon MB", "final state B/URL",
                        "B written/new URL", "of which snapshots", "stream gen µs/page (untimed)",
                        "stream gen / timed CPU"], "rows": rows,
            "notes": ["The stream is generated in the same process, 100 pages at a time, "
                      "outside the timed region; its CPU cost is measured and shown here."]}


def ratio_rows(runs: list[dict[str, Any]], restart: dict[str, float],
               size: int) -> list[list[Any]]:
    by = {(r["impl"], r["cold"]): r for r in runs}
    seen = by.get(("urlseen", False))
    if seen is None:
        return []
    ws = seen["windows"]
    last, whole = _span(ws[-1:]), _span(ws)
    rows: list[list[Any]] = []

    def row(what: str, value: float | None, target: str, ok: bool | None) -> None:
        verdict = "n/a" if value is None or ok is None else ("met" if ok else "NOT met")
        rows.append([what, value, target, verdict])

    for peer, target in (("sqlite", 2.0), ("set", 1.0), ("scrapy", None)):
        if (peer, False) in by:
            pw = by[(peer, False)]["windows"]
            for span, mine, theirs in (("last window", last, _span(pw[-1:])),
                                       ("whole run", whole, _span(pw))):
                r = mine["links_per_cpu_s"] / theirs["links_per_cpu_s"]
                row(f"links/CPU-s, UrlSeen ÷ {by[(peer, False)]['name']}, {span}", r,
                    f">= {target:g}" if target else "(context)",
                    r >= target if target else None)
    mid = [w for (a, b), w in zip(_nominal(ws, size), ws, strict=True)
           if a >= MB and b <= 2 * MB + size]
    if seen["distinct"] >= 2 * MB and mid:
        r = last["links_per_cpu_s"] / _span(mid)["links_per_cpu_s"]
        row("links/CPU-s, UrlSeen last window ÷ its 1M–2M windows", r, ">= 0.8", r >= 0.8)
    else:
        row("links/CPU-s, UrlSeen last window ÷ its 1M–2M windows (run < 2M)", None,
            ">= 0.8", None)
    peak = max(w["vmhwm"] for w in ws)
    row("UrlSeen peak RSS, MB", peak, "<= 250", peak <= 250)
    row("UrlSeen peak anonymous RSS (page-cache run pages excluded), MB", _peak_anon(seen),
        "(context)", None)
    state = ws[-1]["state_b_per_url"]
    row("UrlSeen state on disk, bytes per distinct URL (final)", state, "<= 64", state <= 64)
    row("UrlSeen bytes written per new URL (whole run)", whole["written_b_per_new"], "<= 256",
        whole["written_b_per_new"] <= 256)
    for impl in ("urlseen", "sqlite"):
        if (impl, True) in by and (impl, False) in by:
            r = _span(by[(impl, True)]["windows"])["links_per_s"] / \
                _span(by[(impl, False)]["windows"])["links_per_s"]
            row(f"{by[(impl, False)]['name']}: cold ÷ warm cache, links/s (wall)", r,
                ">= 0.5" if impl == "urlseen" else "(context)",
                r >= 0.5 if impl == "urlseen" else None)
    for key, what in (("stats_cli_s", "`python -m crawler stats DIR`, s (whole process)"),
                      ("reopen_open_s", "reopen: UrlSeen(DIR) on the final state, s")):
        if key in restart:
            row(what, restart[key], "<= 1 (at 10M)", restart[key] <= 1)
    if "python_startup_s" in restart:
        row("(python + import dedup, crawler.cli alone, s)", restart["python_startup_s"],
            "(context)", None)
        if "stats_cli_s" in restart:
            row("(stats minus that start-up, s)",
                restart["stats_cli_s"] - restart["python_startup_s"], "(context)", None)
    return rows


def report_tables(runs: list[dict[str, Any]], restart: dict[str, float],
                  args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    ratios = ratio_rows(runs, restart, args.window)
    tables = [window_table(runs, args.window), summary_table(runs)]
    if ratios:
        tables.append({"title": f"Issue 10 targets (this run: {runs[0]['distinct']:,} distinct "
                       "URLs; the targets are stated at 10M)",
                       "columns": ["figure", "measured", "target", "verdict"], "rows": ratios})
    return tables, ratios
