"""Link extraction: selectolax (lexbor) vs lxml on realistic pages.

Why: after canonicalization, HTML parsing is the biggest per-page CPU cost of a
crawl worker, so `crawler.net.links` uses whichever parser is measured faster here.
(selectolax >= 1.0 dropped its Modest backend; lexbor is the only one left.)

Every variant does the whole job `crawler.net.links.extract_links` does — find
`<base href>`, `<meta name=robots>`, `<a href>` and `<area href>` in document
order — and the script checks that all variants return identical hrefs before
timing them, so no variant wins by doing less.

Pages are generated deterministically (seeded): a site header and navigation,
article text with inline links, a sidebar, a footer, inline scripts and
styles, comments, images, a table and a form — 50-200 links and 20-100 KB per
page. `--dir` adds real pages from a folder of .html files (filtered to the
same size and link range).

    .venv/bin/python bench/html_parsers.py [--pages 200] [--repeat 5] [--dir PATH]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

from lxml import etree
from selectolax.lexbor import LexborHTMLParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler.net.links import extract_links

Extractor = Callable[[bytes], list[str]]

WORDS = [
    "crawler", "frontier", "politeness", "robots", "bloom", "filter", "shard", "ledger",
    "snapshot", "merge", "asyncio", "worker", "host", "queue", "fetch", "parse", "link",
    "canonical", "fingerprint", "hash", "seed", "the", "of", "and", "to", "in", "is", "that",
    "for", "it", "as", "with", "was", "on", "be", "by", "at", "this", "from", "or", "an",
]  # fmt: skip


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _href(rng: random.Random, i: int) -> str:
    kind = rng.random()
    if kind < 0.45:
        return f"/section/{rng.choice(WORDS)}/{i}-{rng.choice(WORDS)}.html"
    if kind < 0.6:
        return f"../{rng.choice(WORDS)}/page{i}?id={rng.randrange(10**6)}&amp;utm_source=x"
    if kind < 0.75:
        return f"https://other{rng.randrange(50)}.example.org/{rng.choice(WORDS)}/{i}"
    if kind < 0.82:
        return f"#anchor-{i}"
    if kind < 0.86:
        return f"mailto:user{i}@example.com"
    if kind < 0.88:
        return "javascript:void(0)"
    return f"  {rng.choice(WORDS)}-{i}.html\n"


def make_page(rng: random.Random, n_links: int, target_bytes: int) -> bytes:
    """Build one page with exactly `n_links` links, padded with prose to ~target_bytes."""
    hrefs = [_href(rng, i) for i in range(n_links)]
    nav, rest = hrefs[: n_links // 4], hrefs[n_links // 4 :]
    parts = [
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>",
        f"<title>{_text(rng, 6)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="description" content="' + _text(rng, 20) + '">',
        '<link rel="stylesheet" href="/static/site.css"><link rel="icon" href="/fav.ico">',
        "<style>body{font-family:sans-serif;margin:0}.nav a{color:#333;padding:4px}"
        + ".card{border:1px solid #ddd;border-radius:4px}" * 20
        + "</style>",
        "<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)}"
        "var tpl='<a href=\"/not-a-link\">x</a>';" + "var x=1;" * 200 + "</script>",
        "</head><body><header class=site><div class=nav><ul>",
    ]
    parts += [f'<li><a class="nav-item" href="{h}">{_text(rng, 2)}</a></li>' for h in nav]
    parts.append("</ul></div></header><main><article><h1>" + _text(rng, 8) + "</h1>")
    body_links = rest[: len(rest) * 2 // 3]
    side_links = rest[len(rest) * 2 // 3 :]
    for i, h in enumerate(body_links):
        rel = ' rel="nofollow noopener"' if i % 11 == 0 else ""
        parts.append(
            f'<p>{_text(rng, rng.randrange(20, 60))} <a href="{h}"{rel}>'
            f"{_text(rng, 3)}</a> {_text(rng, rng.randrange(10, 40))}.</p>"
        )
        if i % 7 == 0:
            parts.append(f'<img src="/img/{i}.jpg" alt="{_text(rng, 3)}" width=300 height=200>')
        if i % 13 == 0:
            parts.append("<!-- " + _text(rng, 10) + ' <a href="/commented-out"> -->')
    parts.append("<table>" + "<tr><td>cell</td><td>" + _text(rng, 4) + "</td></tr>" * 15)
    parts.append("</table><form action=/search><input name=q><button>go</button></form>")
    parts.append("</article><aside><map name=m>")
    for i, h in enumerate(side_links):
        tag = "area" if i % 9 == 0 else "a"
        parts.append(f'<div class=card><{tag} href="{h}">{_text(rng, 4)}</{tag}></div>')
    parts.append("</map></aside></main><footer>")
    html = "".join(parts)
    filler = []
    size = len(html)
    while size < target_bytes - 200:
        p = f"<p class=small>{_text(rng, 40)}</p>"
        filler.append(p)
        size += len(p)
    return (html + "".join(filler) + "</footer></body></html>").encode()


# --- variants -----------------------------------------------------------------------------


def lexbor_css(body: bytes) -> list[str]:
    tree = LexborHTMLParser(body)
    out = []
    for node in tree.css("a[href], area[href]"):
        out.append(node.attributes["href"].strip())
    return out


def lexbor_extract_links(body: bytes) -> list[str]:
    return extract_links(body, "http://example.com/dir/page.html")[1]


_LXML_PARSER = etree.HTMLParser(remove_comments=True, remove_pis=True)


def lxml_iter(body: bytes) -> list[str]:
    root = etree.fromstring(body, _LXML_PARSER)
    out = []
    if root is None:
        return out
    for el in root.iter("a", "area", "base", "meta"):
        href = el.get("href")
        if href is not None and el.tag in ("a", "area"):
            out.append(href.strip())
    return out


def lxml_xpath(body: bytes) -> list[str]:
    root = etree.fromstring(body, _LXML_PARSER)
    if root is None:
        return []
    return [h.strip() for h in root.xpath("//a/@href | //area/@href")]


class _StdlibLinks(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("a", "area"):
            for k, v in attrs:
                if k == "href" and v is not None:
                    self.out.append(v.strip())
                    break


def stdlib_html_parser(body: bytes) -> list[str]:
    p = _StdlibLinks()
    p.feed(body.decode("utf-8", "replace"))
    p.close()
    return p.out


VARIANTS: dict[str, Extractor] = {
    "selectolax-lexbor (css)": lexbor_css,
    "lxml (iter)": lxml_iter,
    "lxml (xpath)": lxml_xpath,
    "stdlib html.parser": stdlib_html_parser,
    "crawler.net.links.extract_links": lexbor_extract_links,
}


def load_dir(path: Path, limit: int) -> list[bytes]:
    pages = []
    for f in sorted(path.rglob("*.html")):
        data = f.read_bytes()
        if 20_000 <= len(data) <= 100_000 and 50 <= len(lexbor_css(data)) <= 200:
            pages.append(data)
            if len(pages) >= limit:
                break
    return pages


def bench(pages: list[bytes], repeat: int) -> None:
    n_links = sum(len(lexbor_css(p)) for p in pages)
    n_bytes = sum(map(len, pages))
    print(
        f"{len(pages)} pages, {n_bytes / len(pages) / 1024:.1f} KB and "
        f"{n_links / len(pages):.0f} links per page on average"
    )
    # Every variant must find the same hrefs (extract_links also drops empty ones).
    ref = [[h for h in lexbor_css(p) if h] for p in pages]
    for name, fn in VARIANTS.items():
        if [[h for h in fn(p) if h] for p in pages] != ref:
            raise SystemExit(f"{name} disagrees with selectolax-lexbor on the hrefs")
    # Rounds interleave the variants so that load from other processes hits all alike.
    runs: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(repeat):
        for name, fn in VARIANTS.items():
            t0 = time.perf_counter()
            for p in pages:
                fn(p)
            runs[name].append(time.perf_counter() - t0)
    for name, times in runs.items():
        best = min(times)
        print(
            f"  {name:30s} {best / len(pages) * 1e6:8.0f} µs/page "
            f"(median {statistics.median(times) / len(pages) * 1e6:6.0f})  "
            f"{n_links / best / 1e6:6.2f} M links/s  {n_bytes / best / 1e6:6.1f} MB/s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", type=Path, help="also bench real .html files under this folder")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    pages = [
        make_page(rng, rng.randrange(50, 201), rng.randrange(20_000, 100_001))
        for _ in range(args.pages)
    ]
    print("synthetic pages:")
    bench(pages, args.repeat)
    if args.dir:
        real = load_dir(args.dir, args.pages)
        if real:
            print(f"real pages from {args.dir}:")
            bench(real, args.repeat)
        else:
            print(f"no .html files of 20-100 KB with 50-200 links under {args.dir}")


if __name__ == "__main__":
    main()
