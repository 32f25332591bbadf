"""``make demo`` (``python -m crawler.demo``) on a small site: it runs, crawls the
sample site completely (its own check compares with the generator's reachable
set), and what the README says to run next works on its state."""

from __future__ import annotations

import asyncio
import re
import sys

from tests.support.helpers import REPO, cli_env, run_cli


async def test_the_demo_crawls_its_sample_site_completely(tmp_path):
    state = tmp_path / "demo-state"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler.demo", "--state", str(state), "--pages", "40",
        cwd=REPO, env=cli_env(), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    text = err.decode()
    assert proc.returncode == 0, text
    m = re.search(r"check: fetched set == reachable set \((\d+) URLs\), each once", text)
    assert m and int(m.group(1)) > 100, text
    assert "finished after" in text
    stats = await run_cli("stats", str(state))  # the README's next step
    assert stats.rc == 0, stats.stderr
    assert "0 queued" in stats.stdout
