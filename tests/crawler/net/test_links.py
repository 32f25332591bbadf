"""extract_links: what a real HTML parser finds, raw and in document order."""

from __future__ import annotations

from crawler.net.links import extract_links, page_meta_robots

PAGE = "http://example.com/dir/page.html"


def links(html: str | bytes, **kw: object) -> tuple[str, list[str]]:
    body = html.encode() if isinstance(html, str) else html
    return extract_links(body, PAGE, **kw)  # type: ignore[arg-type]


def test_a_and_area_in_document_order() -> None:
    html = """<html><body>
      <a href="/one">1</a>
      <map name=m><area href="two.html" alt=x><area alt=nohref></map>
      <div><p><a href="https://other.org/three">3</a></p></div>
      <a name=anchor-without-href>x</a>
      <area href='four'>
    </body></html>"""
    assert links(html) == (PAGE, ["/one", "two.html", "https://other.org/three", "four"])


def test_base_href_relative_is_resolved_against_the_page() -> None:
    html = '<head><base href="../other/"></head><a href="x.html">x</a>'
    assert links(html) == ("http://example.com/other/", ["x.html"])


def test_base_href_absolute() -> None:
    html = '<head><base href="https://cdn.example.org/assets/"></head><a href="x">x</a>'
    assert links(html)[0] == "https://cdn.example.org/assets/"


def test_only_the_first_base_with_href_counts() -> None:
    html = '<base target=_blank><base href="/first/"><base href="/second/"><a href=a>a</a>'
    assert links(html)[0] == "http://example.com/first/"


def test_non_http_base_is_ignored() -> None:
    for base in ("javascript:alert(1)", "ftp://files.example.com/", "data:text/html,x"):
        assert links(f'<base href="{base}"><a href=a>a</a>')[0] == PAGE, base


def test_base_with_surrounding_whitespace() -> None:
    assert links('<base href="  /b/ \n"><a href=a>a</a>')[0] == "http://example.com/b/"


def test_hrefs_are_stripped_but_otherwise_raw() -> None:
    html = (
        '<a href="  /spaced \n">1</a>'
        '<a href="\t../up?a=1&amp;b=2#frag">2</a>'
        '<a href="javascript:void(0)">3</a>'
        '<a href="mailto:someone@example.com">4</a>'
        '<a href="#top">5</a>'
        '<a href="HTTP://EXAMPLE.com/Caps">6</a>'
    )
    assert links(html)[1] == [
        "/spaced",
        "../up?a=1&b=2#frag",  # entities decoded by the parser, nothing else changed
        "javascript:void(0)",
        "mailto:someone@example.com",
        "#top",
        "HTTP://EXAMPLE.com/Caps",
    ]


def test_empty_hrefs_are_dropped() -> None:
    assert links('<a href="">x</a><a href="   ">y</a><a href>z</a><a href=/k>k</a>')[1] == ["/k"]


def test_links_in_comments_scripts_and_styles_are_not_links() -> None:
    html = """<script>var s = '<a href="/in-script">';</script>
      <!-- <a href="/in-comment">old</a> -->
      <style>a[href="/in-style"] {}</style>
      <noscript><a href="/in-noscript">n</a></noscript>
      <textarea><a href="/in-textarea"></a></textarea>
      <a href="/real">r</a>"""
    assert links(html)[1] == ["/in-noscript", "/real"]


def test_broken_html_still_yields_links() -> None:
    html = (
        b"<html><body><div><p><a href=/unquoted>u</p>"
        b"<a href='/single'>s<a href=\"/nested-unclosed\">n"
        b"<table><tr><td><a href=/in-table>t</td></table>"
        b'<a href="/unterminated>x</a><a href=/after>'
    )
    # As in browsers (HTML5 "eof-in-tag"), a tag still open at end of file is dropped.
    assert links(html)[1] == ["/unquoted", "/single", "/nested-unclosed", "/in-table"]


def test_nofollow_rel_dropped_only_when_asked() -> None:
    html = (
        '<a href="/a">a</a><a href="/b" rel="NoFollow">b</a>'
        '<a href="/c" rel="noopener   nofollow ugc">c</a><a href="/d" rel="nofollowing">d</a>'
        '<area href="/e" rel="nofollow">'
    )
    assert links(html)[1] == ["/a", "/b", "/c", "/d", "/e"]
    assert links(html, nofollow=True)[1] == ["/a", "/d"]


def test_meta_robots_nofollow_drops_all_links_when_asked() -> None:
    for content in ("nofollow", "noindex, nofollow", "NOINDEX,NOFOLLOW", "none"):
        html = f'<head><meta name="Robots" content="{content}"></head><a href="/a">a</a>'
        assert links(html, nofollow=True)[1] == [], content
        assert links(html)[1] == ["/a"], content


def test_meta_robots_without_nofollow_keeps_links() -> None:
    html = '<meta name=robots content="noindex"><meta name=description content=nofollow>'
    assert links(html + '<a href="/a">a</a>', nofollow=True)[1] == ["/a"]


def test_meta_robots_nofollow_still_reports_the_base() -> None:
    html = '<base href="/b/"><meta name=robots content=nofollow><a href="/a">a</a>'
    assert links(html, nofollow=True) == ("http://example.com/b/", [])


def test_unknown_charset_and_invalid_bytes_do_not_raise() -> None:
    body = b'<a href="/caf\xe9">x</a><a href="/\xff\xfe\xc3(">y</a><a href="/ok">z</a>'
    for charset in ("x-unknown-garbage", "base64", "", None, "utf-8"):
        base, hrefs = links(body, charset=charset)
        assert base == PAGE and len(hrefs) == 3 and hrefs[2] == "/ok", charset
        assert hrefs[0] == "/caf\ufffd", charset


def test_header_charset_decodes_non_ascii_hrefs() -> None:
    body = '<a href="/привет">x</a>'.encode("windows-1251")
    assert links(body, charset="windows-1251")[1] == ["/привет"]
    assert links(body, charset="cp1251")[1] == ["/привет"]


def test_meta_charset_is_used_without_a_header_charset() -> None:
    body = '<meta charset="windows-1251"><a href="/привет">x</a>'.encode("windows-1251")
    assert links(body)[1] == ["/привет"]


def test_header_charset_wins_over_meta() -> None:
    body = '<meta charset="windows-1251"><a href="/é">x</a>'.encode("latin-1")
    assert links(body, charset="iso-8859-1")[1] == ["/é"]


def test_utf8_default_and_bom() -> None:
    assert links('<a href="/日本">x</a>')[1] == ["/日本"]
    assert links(b"\xef\xbb\xbf" + '<a href="/日本">x</a>'.encode())[1] == ["/日本"]


def test_empty_and_non_html_bodies() -> None:
    assert links(b"") == (PAGE, [])
    assert links(b"\x00\x01\x02 not html at all") == (PAGE, [])
    assert links(b"%PDF-1.4 <a href=/looks-like-a-link>")[1] == ["/looks-like-a-link"]


def test_page_meta_robots() -> None:
    body = b'<meta name="robots" content="NoIndex, follow"><meta name=ROBOTS content=noarchive>'
    assert page_meta_robots(body) == frozenset({"noindex", "follow", "noarchive"})
    assert page_meta_robots(b"<p>nothing</p>") == frozenset()


def test_the_main_text_leaves_out_menus_link_lists_and_scripts():
    from crawler.net.links import extract_page

    page = (b"<html><head><title>T</title><script>var x = 'code';</script></head><body>"
            b"<header>Site name</header><nav><a href='/a'>Home</a></nav>"
            b"<p>The first paragraph, with <a href='/in'>a link in it</a>.</p>"
            b"<ul><li><a href='/r1'>Related one</a></li><li><a href='/r2'>Related two</a></li>"
            b"</ul><aside>Ad text</aside><footer>Copyright</footer></body></html>")
    _, hrefs, text = extract_page(page, "http://h/")
    assert hrefs == ["/a", "/in", "/r1", "/r2"]  # every link still found
    assert text.split() == ["The", "first", "paragraph,", "with", "a", "link", "in", "it", "."]
    with_main = page.replace(b"<p>", b"<main><p>").replace(b"</ul>", b"</ul></main>")
    assert extract_page(with_main, "http://h/")[2].split()[:3] == ["The", "first", "paragraph,"]
    assert extract_page(page, "http://h/", text=False)[2] is None
    assert extract_page(b"", "http://h/")[2] == ""
