"""Include/exclude URL patterns: what a crawl fetches (per the server's log), seeds they
exclude, resume keeping them, and the one-alternation matcher agreeing with re."""

from __future__ import annotations

import re

import pytest
from aiohttp import web

from crawler.cli.main import main
from crawler.config.scope import Scope, SeedError, UrlPatterns
from crawler.config.settings import ConfigError
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl
from tests.support.faultserver import add_request_log, serve
from tests.support.helpers import config_toml, fast_settings, run_cli, write_seeds

# path -> the links on that page
SITE = {
    "/docs/": ["/docs/a", "/docs/print/b", "/blog/x", "/docs/c?sessionid=9", "/DOCS/upper"],
    "/docs/a": ["/docs/d", "/blog/y", "/docs/a"],
    "/docs/d": ["/docs/"],
    "/blog/x": ["/docs/z"],
    "/blog/y": [],
    "/docs/print/b": [],
    "/docs/c": [],
    "/docs/z": [],
    "/DOCS/upper": [],
}
INCLUDE = ["/docs/"]
EXCLUDE = ["/print/", "[?&]sessionid="]
# /blog/* match no include; /docs/print/b and /docs/c?sessionid=9 an exclude; /docs/z
# is linked only from /blog/x; /DOCS/upper: patterns are case-sensitive
WANT = {"/docs/", "/docs/a", "/docs/d"}


def site_app() -> tuple[web.Application, object]:
    app = web.Application()
    log = add_request_log(app)

    async def page(request: web.Request) -> web.Response:
        links = SITE.get(request.path)
        if links is None:
            raise web.HTTPNotFound()
        body = "".join(f'<a href="{h}">{h}</a>' for h in links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    app.router.add_get("/{tail:.*}", page)
    return app, log


def fetched_paths(log) -> set[str]:
    return {r.path for r in log.records if r.path != "/robots.txt"}


async def test_include_and_exclude_decide_what_is_fetched_and_recorded(tmp_path):
    app, log = site_app()
    async with serve(app) as base:
        settings = fast_settings(crawl={"include": INCLUDE, "exclude": EXCLUDE})
        seen, scope, problems = create_crawl(tmp_path / "s", settings,
                                             write_seeds(tmp_path / "seeds", [base + "/docs/"]))
        assert problems == []
        try:
            await Engine(seen, settings, scope).run()
            counts = seen.ledger.counts()
        finally:
            seen.close()
    assert fetched_paths(log) == WANT
    assert sum(1 for r in log.records if r.path != "/robots.txt") == len(WANT)  # each once
    # excluded URLs were never admitted: not in pages.jsonl, not in the ledger
    assert {r["url"].removeprefix(base) for r in read_pages(tmp_path / "s" / "pages.jsonl")} \
        == WANT
    assert counts["admitted"] == len(WANT)


async def test_excluded_seeds_are_reported_and_the_patterns_survive_resume(tmp_path):
    """Through the command line: --include/--exclude, a seed they exclude is named with
    its line, resume refuses new patterns and keeps the crawl's."""
    app, log = site_app()
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(fast_settings()))
    async with serve(app) as base:
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/docs/", base + "/blog/x"])
        state = str(tmp_path / "state")
        flags = ["--config", str(config), "--quiet"]
        first = await run_cli("crawl", str(seeds), "--state", state, *flags,
                              "--include", INCLUDE[0], "--exclude", EXCLUDE[0],
                              "--exclude", EXCLUDE[1], "--max-pages", "1")
        assert first.rc == 0, first.stderr
        assert f"{seeds}:2: out of scope, matches no --include pattern: " \
               f"'{base}/blog/x'" in first.stderr
        assert fetched_paths(log) == {"/docs/"}
        refused = await run_cli("resume", state, "--exclude", "/docs/a")
        assert refused.rc == 2 and "resume cannot change --exclude" in refused.stderr
        resumed = await run_cli("resume", state, "--quiet", "--max-pages", "0")
        assert resumed.rc == 0, resumed.stderr
        assert fetched_paths(log) == WANT


def test_a_crawl_of_only_excluded_seeds_or_a_bad_pattern_is_refused(tmp_path, capsys):
    seeds = write_seeds(tmp_path / "bad.txt", ["http://127.0.0.1:9/docs/print/b"])
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "none"),
                 "--exclude", "/print/"]) == 1
    assert "no valid URL (1 out of scope by --include/--exclude)" in capsys.readouterr().err
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "none"),
                 "--include", "(unclosed"]) == 2
    assert "not a regular expression: '(unclosed'" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_excluded_seed_in_process_and_all_excluded(tmp_path):
    settings = fast_settings(crawl={"exclude": ["/private"]})
    seeds = write_seeds(tmp_path / "seeds", ["http://127.0.0.1:9/a", "http://127.0.0.2:9/private"])
    seen, scope, problems = create_crawl(tmp_path / "s", settings, seeds)
    seen.close()
    assert problems == [f"{seeds}:2: out of scope, matches an --exclude pattern: "
                        "'http://127.0.0.2:9/private'"]
    assert scope.hosts == {"127.0.0.1:9"}  # an excluded seed puts no host in scope
    assert scope.exclude == ("/private",)
    with pytest.raises(SeedError, match="1 out of scope"):
        create_crawl(tmp_path / "t", settings, write_seeds(tmp_path / "only",
                                                           ["http://127.0.0.1:9/private"]))


def test_bad_patterns_in_a_config_are_errors_naming_the_key():
    with pytest.raises(ConfigError, match=r"\[crawl\] exclude must be regular expressions"):
        fast_settings(crawl={"exclude": ["ok", "[bad"]})


@pytest.mark.parametrize("patterns", [
    ["/a/", "/b/"],
    ["(x)\\1", "(y)\\1"],  # numbered backreferences: not merged, numbers would shift
    ["(?i)/docs/", "/blog/"],  # global flags: only valid at the start of a whole regex
    ["(?P<n>a)", "(?P<n>b)"],  # one group name twice
    ["^http://h/$"],
])
def test_the_combined_matcher_agrees_with_each_pattern(patterns):
    urls = ["http://h/", "http://h/a/1", "http://h/b/", "http://h/xx", "http://h/yy",
            "http://h/DOCS/", "http://h/blog/", "http://h/c"]
    p = UrlPatterns(include=patterns)
    q = UrlPatterns(exclude=patterns)
    for url in urls:
        hit = any(re.search(x, url) for x in patterns)
        assert p.allows(url) is hit and q.allows(url) is not hit, url
        assert (p.why_not(url) is None) is hit


def test_scope_stores_patterns_only_when_set():
    """A fleet's identity hashes the scope's dict: a crawl without patterns keeps its hash."""
    assert Scope.for_seeds(["http://a/"]).to_dict() == {"hosts": ["a"], "domains": []}
    s = Scope.for_seeds(["http://a/"], include=["x"], exclude=["y"])
    assert Scope.from_dict(s.to_dict()) == s and s.to_dict()["include"] == ["x"]
