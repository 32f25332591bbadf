"""The dashboard page (``dashboard.html``, package data): served live, or written
as a report with the document embedded. One page, so both draw the same charts.

Why no library: the charts are lines and bars over at most a few hundred
points, a hundred lines of vanilla JS drawing SVG; the page then loads nothing
from anywhere and a report opens without a network.
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["render_page"]


@cache
def _template() -> str:
    return files("crawler.ui").joinpath("dashboard.html").read_text(encoding="utf-8")


def render_page(doc: dict[str, Any] | None, *, title: str) -> str:
    """The page: with ``doc`` embedded it draws that (a report) and polls nothing;
    without, it polls ``api/stats`` next to it every ``interval`` seconds."""
    data = "null" if doc is None else json.dumps(doc, separators=(",", ":"))
    # inside <script>: "</" must not end the element, and U+2028/9 are fine in JSON
    data = data.replace("</", "<\\/").replace("<!--", "<\\!--")
    return (_template().replace("__TITLE__", html.escape(title))
            .replace("/*__DATA__*/null", data))
