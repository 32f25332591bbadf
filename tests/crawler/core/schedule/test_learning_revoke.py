"""A learned rule that a later check contradicts is revoked, and every URL it kept from
being fetched is admitted again and fetched: no distinct content is lost to a rule that
held on the pages it was learned from. The site (built here, ground truth from its
generator): under /a/ a parameter ``v`` changes nothing, so "v ignored" is learned;
under /b/, found only after that, ``v`` picks another text."""

from __future__ import annotations

import json
import random
from pathlib import Path

from aiohttp import web

from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl
from dedup import HELD_KINDS
from tests.support.faultserver import serve
from tests.support.helpers import fast_settings, run_cli, write_seeds

A_PAGES = 20  # /a/N, /a/N?v=x, /a/N?v=y: one content each N
B_PAGES = 10  # /b/M, /b/M?v=x, /b/M?v=y: three contents each M
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "du", "fe"]


def text_of(content: str) -> str:
    """A content's text: 60 words drawn from its own seed, so that two contents share
    almost no 3-word shingles (far apart in SimHash) and one content is always the same."""
    rng = random.Random(content)
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(3)) for _ in range(60))


def content_of(path: str, v: str | None) -> str | None:
    """The content id a URL serves (None: no such page): the generator's ground truth."""
    parts = path.strip("/").split("/")
    if path == "/":
        return "home"
    if path == "/b/":
        return "b-index"
    if len(parts) == 2 and parts[1].isdigit():
        n = int(parts[1])
        if parts[0] == "a" and 1 <= n <= A_PAGES and v in (None, "x", "y"):
            return f"a{n}"
        if parts[0] == "b" and 1 <= n <= B_PAGES and v in (None, "x", "y"):
            return f"b{n}-{v or ''}"
    return None


def links_of(content: str) -> list[str]:
    if content == "home":
        return [f"/a/{n}{q}" for n in range(1, A_PAGES + 1) for q in ("", "?v=x", "?v=y")]
    if content == f"a{A_PAGES}":
        return ["/", "/b/"]  # /b/ only from the last /a/ page: found after the rule
    if content == "b-index":
        return [f"/b/{m}{q}" for m in range(1, B_PAGES + 1) for q in ("", "?v=x", "?v=y")]
    return ["/"]


def truth() -> set[str]:
    return {"home", "b-index", *(f"a{n}" for n in range(1, A_PAGES + 1)),
            *(f"b{m}-{v}" for m in range(1, B_PAGES + 1) for v in ("", "x", "y"))}


def make_app(served: list[str]) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        content = content_of(request.path, request.query.get("v"))
        if content is None or set(request.query) - {"v"}:
            raise web.HTTPNotFound()
        served.append(content)
        links = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links_of(content))
        body = (f"<html><body><nav><ul>{links}</ul></nav><main><h1>{content}</h1>"
                f"<p>{text_of(content)}</p></main></body></html>")
        return web.Response(text=body, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    return app


async def test_a_contradicted_rule_is_revoked_and_every_url_it_kept_is_fetched(tmp_path: Path):
    served: list[str] = []
    async with serve(make_app(served)) as base:
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        settings = fast_settings(crawl={"max_depth": 10})
        seen, scope, _ = create_crawl(tmp_path / "state", settings, seeds)
        try:
            summary = await Engine(seen, settings, scope).run()
            rules = seen.records.learned_rules()
            held = list(seen.records.held())
        finally:
            seen.close()
        listed = json.loads((await run_cli("rules", str(tmp_path / "state"), "--json")).stdout)
    assert summary["outcome"] == "finished"
    assert set(served) == truth()  # every distinct content, the /b/ variants too
    v = [r for r in rules if r.rule == {"kind": "drop_params", "names": ["v"]}]
    assert [r.state for r in v] == ["revoked"]  # accepted on /a/, contradicted on /b/
    rule = next(r for r in listed["rules"] if r["id"] == v[0].id)
    assert any("/b/" in url for url in rule["counter_example"])
    records = read_pages(tmp_path / "state" / "pages.jsonl")
    fetched = {r["url"] for r in records if r["status"] == 200}
    # each /b/ variant fetched under its own URL (those the rule had held: admitted again)
    assert {f"{base}/b/{m}?v={x}" for m in range(1, B_PAGES + 1) for x in "xy"} <= fetched
    # nothing is still held for the revoked rule
    suppressed = HELD_KINDS["suppressed"]
    assert not [h for h in held if h.kind == suppressed and str(v[0].id) in h.why.split(",")]
    assert len(records) == len({r["url"] for r in records})  # a line per URL
