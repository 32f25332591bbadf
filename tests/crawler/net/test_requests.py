"""What the requests say and which way they go: user agent, extra headers, cookies,
robots.txt groups for the configured agent, and proxies (the environment's, --proxy,
NO_PROXY), each seen by a real server or a real recording proxy on loopback."""

from __future__ import annotations

import base64

import pytest
from aiohttp import web

from crawler.cli.main import main
from crawler.config.settings import FetchSettings
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl, open_crawl
from crawler.net.fetch import Fetcher
from tests.support.faultserver import HostMap, serve
from tests.support.helpers import config_toml, fast_settings, run_cli, write_seeds
from tests.support.proxyserver import forward_proxy

ROBOTS = """\
User-agent: TestBot
Disallow: /secret

User-agent: *
Disallow: /bots-only
"""


class Site:
    """Pages / -> /next -> (/secret, /bots-only); / sets a cookie; every request's
    headers are kept in ``seen`` as (path, headers)."""

    def __init__(self, name: str = "s3cr3t") -> None:
        self.name = name
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.app = web.Application()
        self.app.router.add_get("/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.path, dict(request.headers)))
        if request.path == "/robots.txt":
            return web.Response(text=ROBOTS)
        links = {"/": ["/next"], "/next": ["/secret", "/bots-only"]}.get(request.path, [])
        resp = web.Response(text="<html>" + "".join(f'<a href="{h}">x</a>' for h in links)
                            + "</html>", content_type="text/html")
        if request.path == "/":
            resp.set_cookie("sid", self.name, path="/")
        return resp

    def headers(self, path: str) -> dict[str, str]:
        (h,) = [h for p, h in self.seen if p == path]
        return h

    def paths(self) -> set[str]:
        return {p for p, _ in self.seen}


async def test_user_agent_headers_cookies_and_robots_groups_from_the_command_line(tmp_path):
    site = Site()
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(fast_settings()))
    async with serve(site.app) as base:
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        r = await run_cli("crawl", str(seeds), "--state", str(tmp_path / "s"),
                          "--config", str(config), "--quiet",
                          "--user-agent", "TestBot/2.0 (+https://example.test/bot)",
                          "--header", "X-Crawl-Token: abc 123", "--header", "Accept-Language:de",
                          "--cookies")
    assert r.rc == 0, r.stderr
    # robots.txt read for TestBot's group: /secret disallowed, /bots-only (for *) fetched
    assert site.paths() == {"/robots.txt", "/", "/next", "/bots-only"}
    for path in site.paths():
        h = site.headers(path)
        assert h["User-Agent"] == "TestBot/2.0 (+https://example.test/bot)"
        assert h["X-Crawl-Token"] == "abc 123" and h["Accept-Language"] == "de"
    assert "Cookie" not in site.headers("/")
    assert site.headers("/next")["Cookie"] == "sid=s3cr3t"  # set by /, sent back
    records = read_pages(tmp_path / "s" / "pages.jsonl")
    assert {r["url"].removeprefix(base): r["error"] for r in records} == {
        "/": None, "/next": None, "/bots-only": None, "/secret": "robots.txt"}


async def test_cookies_are_off_by_default_and_kept_per_host(tmp_path):
    one, two = Site("one"), Site("two")
    async with serve(one.app) as a, serve(two.app, host="127.0.0.2") as b:
        for name, cookies in (("off", False), ("on", True)):
            one.seen.clear()
            two.seen.clear()
            settings = fast_settings(fetch={"cookies": cookies},
                                     politeness={"obey_robots": False})
            seen, scope, _ = create_crawl(tmp_path / name, settings,
                                          write_seeds(tmp_path / f"{name}.txt", [a + "/", b + "/"]))
            try:
                await Engine(seen, settings, scope).run()
            finally:
                seen.close()
            assert "Cookie" not in one.headers("/") and "Cookie" not in two.headers("/")
            for site in (one, two):
                sent = [h.get("Cookie") for p, h in site.seen if p != "/"]
                want = f"sid={site.name}" if cookies else None
                assert sent and all(c == want for c in sent), (name, sent)


async def test_proxy_from_the_environment_the_flag_and_no_proxy(tmp_path):
    """A subprocess crawl whose environment the test sets: HTTP_PROXY carries every
    request (robots.txt included), --proxy beats it, NO_PROXY sends a host direct."""
    site = Site()
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(fast_settings()))
    async with serve(site.app) as base, forward_proxy() as env_proxy, \
            forward_proxy() as flag_proxy:
        seeds = write_seeds(tmp_path / "seeds.txt", [base + "/"])
        want = {base + p for p in ("/robots.txt", "/", "/next", "/secret")}

        async def crawl(name: str, *flags: str, **env: str) -> None:
            r = await run_cli("crawl", str(seeds), "--state", str(tmp_path / name),
                              "--config", str(config), "--quiet", *flags,
                              env=env)
            assert r.rc == 0, r.stderr
            assert len(read_pages(tmp_path / name / "pages.jsonl")) == 4  # 3 + /bots-only

        await crawl("env", HTTP_PROXY=env_proxy.url)
        assert set(env_proxy.urls()) == want and len(env_proxy.log) == 4
        assert all(r.headers["User-Agent"].startswith("bloomcrawl/") for r in env_proxy.log)
        assert len(site.seen) == 4  # what the proxy forwarded, nothing direct
        del env_proxy.log[:]

        await crawl("flag", "--proxy", flag_proxy.url, http_proxy=env_proxy.url)
        assert set(flag_proxy.urls()) == want and env_proxy.log == []
        del flag_proxy.log[:]

        site.seen.clear()
        await crawl("direct", HTTP_PROXY=env_proxy.url, NO_PROXY="localhost, 127.0.0.1")
        assert env_proxy.log == [] and len(site.seen) == 4

        # resume --proxy: stored as the crawl's proxy from then on
        seen, _, _ = create_crawl(tmp_path / "later", fast_settings(), seeds)
        seen.close()
        r = await run_cli("resume", str(tmp_path / "later"), "--quiet", "--proxy",
                          flag_proxy.url)
        assert r.rc == 0, r.stderr
        assert set(flag_proxy.urls()) == want
    later, stored, _ = open_crawl(tmp_path / "later")
    later.close()
    assert stored.fetch.proxy == flag_proxy.url


async def test_through_a_proxy_the_guard_still_judges_the_target(tmp_path):
    """The proxy is on loopback (allowed: the user chose it); a target whose name
    resolves to a private address, or a private literal, is refused before the proxy
    hears of it; a public name goes through, with the proxy's credentials."""
    site = Site()
    async with serve(site.app) as base:
        port = base.rsplit(":", 1)[1]
        async with forward_proxy({"public.test:80": f"127.0.0.1:{port}"}) as proxy:
            user_url = proxy.url.replace("http://", "http://bot:pw@")
            dns = HostMap({"public.test": "93.184.216.34", "internal.test": "10.0.0.7"})
            s = FetchSettings(proxy=user_url, connect_timeout=2, total_timeout=10)
            async with Fetcher(s, resolver=dns) as fetcher:
                ok = await fetcher.fetch("http://public.test/next")
                private = await fetcher.fetch("http://internal.test/")
                literal = await fetcher.fetch(f"{base}/")
    assert ok.status == 200 and ok.error is None and b"/secret" in ok.body
    assert private.status is None
    assert private.error == "refused private address 10.0.0.7 (needs --allow-private)"
    assert literal.status is None
    assert literal.error == "refused private address 127.0.0.1 (needs --allow-private)"
    assert proxy.urls() == ["http://public.test/next"]
    auth = "Basic " + base64.b64encode(b"bot:pw").decode()
    assert proxy.log[0].headers["Proxy-Authorization"] == auth
    assert site.paths() == {"/next"} and "Proxy-Authorization" not in site.headers("/next")


@pytest.mark.parametrize("flags, env, fragment", [
    (["--header", "NoColonHere"], {}, "not a header 'Name: value': 'NoColonHere'"),
    (["--header", "Bad Name: x"], {}, "not a header 'Name: value'"),
    (["--header", "User-Agent: x"], {}, "set the user agent with --user-agent"),
    (["--proxy", "ftp://127.0.0.1:21"], {}, "not a proxy URL"),
    ([], {"HTTP_PROXY": "not a url"}, "HTTP_PROXY: not a proxy URL"),
])
def test_bad_request_options_are_usage_errors(tmp_path, capsys, monkeypatch, flags, env,
                                             fragment):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    assert main(["crawl", str(seeds), "--state", str(tmp_path / "s"), *flags]) == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_resume_refuses_new_request_settings(tmp_path, capsys, monkeypatch):
    seeds = write_seeds(tmp_path / "seeds.txt", ["http://127.0.0.1:9/"])
    settings = fast_settings(crawl={"max_pages": 1})
    seen, _, _ = create_crawl(tmp_path / "s", settings, seeds)
    seen.close()
    assert main(["resume", str(tmp_path / "s"), "--user-agent", "Other/1"]) == 2
    assert "resume cannot change --user-agent" in capsys.readouterr().err
    assert main(["resume", str(tmp_path / "s"), "--cookies"]) == 2
    assert "resume cannot change --cookies" in capsys.readouterr().err
    monkeypatch.setenv("HTTPS_PROXY", "http://bad host")  # never direct instead
    assert main(["resume", str(tmp_path / "s")]) == 2
    assert "HTTPS_PROXY: not a proxy URL" in capsys.readouterr().err


def test_a_fleet_hands_scope_and_request_options_to_its_workers(tmp_path):
    from crawler.cli.args import crawl_settings, worker_flags
    from crawler.cli.main import build_parser

    options = ["--include", "/docs/", "--exclude", "/print/", "--user-agent", "TestBot/2",
               "--header", "X-A: 1", "--header", "X-B: 2", "--cookies",
               "--proxy", "http://127.0.0.1:3128"]
    fleet = build_parser().parse_args(["fleet", "seeds", "--state", "d", "--workers", "2",
                                       *options])
    flags = worker_flags(fleet, 1)
    worker = build_parser().parse_args(["crawl", "seeds", "--state", "d/worker-1", *flags])
    s = crawl_settings(worker)
    assert s == crawl_settings(fleet)
    assert (s.crawl.include, s.crawl.exclude) == (("/docs/",), ("/print/",))
    assert (s.fetch.user_agent, s.fetch.headers, s.fetch.cookies, s.fetch.proxy) == (
        "TestBot/2", ("X-A: 1", "X-B: 2"), True, "http://127.0.0.1:3128")
