"""``make screenshots``: the dashboard during a demo crawl and the report after it, as
PNG files in docs/ (README shows them), taken by headless Chromium.

The crawl is the demo's (``crawler.demo``: the generated site on 127.0.0.x), slowed
down by a per-host delay so that the dashboard has a minute of history to show.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from crawler.admin.htmlreport import write_report
from crawler.core.run.engine import Engine, run_crawl
from crawler.core.run.progress import Progress
from crawler.core.state.state import create_crawl
from crawler.demo.run import HOST_IPS, demo_settings, demo_site
from crawler.demo.site import SiteSpec
from crawler.ui.address import bind_ui
from crawler.ui.live import Dashboard, EngineProbe

# Without the background-networking flags Chromium reaches out to Google services.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("make screenshots needs Chromium: apt-get install chromium")


async def screenshot(url: str, out: Path, *, width: int = 1400, height: int = 1650) -> None:
    """``url`` as ``out`` (PNG), once its scripts ran (virtual time: the page's first
    poll of the dashboard answers at once)."""
    with tempfile.TemporaryDirectory(prefix="bloomcrawl-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
            f"--window-size={width},{height}", "--virtual-time-budget=4000",
            f"--screenshot={out}", url, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        if await asyncio.wait_for(proc.wait(), 120) != 0 or not out.exists():
            raise SystemExit(f"chromium could not take {out}")
    print(f"wrote {out}", file=sys.stderr)


async def take(out_dir: Path, *, after: float) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = SiteSpec(hosts=len(HOST_IPS), pages=750, seed=42, trap=True)
    async with demo_site(spec) as site:
        seeds = site.seeds
        with tempfile.TemporaryDirectory(prefix="bloomcrawl-screenshots-") as tmp:
            state = Path(tmp) / "demo-crawl"
            seeds_file = Path(tmp) / "seeds.txt"
            seeds_file.write_text("".join(u + "\n" for u in seeds))
            settings = demo_settings(10).with_values(
                politeness={"per_host": 2, "delay": 0.04})
            seen, scope, _ = create_crawl(state, settings, seeds_file)
            sock = bind_ui("127.0.0.1", 0)
            shot: asyncio.Task[None] | None = None

            @contextlib.asynccontextmanager
            async def watch(engine: Engine) -> AsyncIterator[Dashboard]:
                nonlocal shot
                dash = Dashboard(EngineProbe(engine), sock)
                await dash.start()

                async def later() -> None:
                    await asyncio.sleep(after)
                    await screenshot(dash.url, out_dir / "dashboard.png")
                shot = asyncio.create_task(later())
                try:
                    yield dash
                finally:
                    if not shot.done():  # the crawl ended first: take it now
                        shot.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await shot
                        await screenshot(dash.url, out_dir / "dashboard.png")
                    else:
                        shot.result()
                    await dash.stop()

            try:
                await run_crawl(seen, settings, scope, progress=Progress(), watch=watch)
            finally:
                seen.close()
            report = out_dir / "report.html"
            write_report(state, report)
            await screenshot(report.resolve().as_uri(), out_dir / "report.png")
            report.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m crawler.demo.screenshots", description=__doc__)
    p.add_argument("--out", default="docs", help="directory for dashboard.png and report.png")
    p.add_argument("--after", type=float, default=25.0,
                   help="seconds of crawling before the dashboard's screenshot")
    args = p.parse_args(argv)
    asyncio.run(take(Path(args.out), after=args.after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
