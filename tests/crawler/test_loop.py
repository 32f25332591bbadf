"""Which event loop ``crawl`` and ``resume`` run on (``--loop``, crawler.cli.loop)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from crawler.cli.args import UsageError
from crawler.cli.loop import loop_factory, run
from crawler.cli.main import build_parser


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_is_uvloop_when_installed_and_asyncio_turns_it_off():
    uvloop = pytest.importorskip("uvloop")
    assert loop_factory("auto") is uvloop.new_event_loop
    assert run(_loop_module(), "auto").startswith("uvloop")
    assert run(_loop_module(), "uvloop").startswith("uvloop")
    assert loop_factory("asyncio") is None
    assert run(_loop_module(), "asyncio").startswith("asyncio")


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert loop_factory("auto") is None
    assert run(_loop_module(), "auto").startswith("asyncio")
    with pytest.raises(UsageError, match=r"uvloop is not installed .*bloomcrawl\[fast\]"):
        loop_factory("uvloop")


@pytest.mark.parametrize("command", [["crawl", "seeds.txt", "--state", "s"], ["resume", "s"]])
def test_crawl_and_resume_take_loop(command):
    parser = build_parser()
    assert parser.parse_args(command).loop == "auto"
    assert parser.parse_args([*command, "--loop", "asyncio"]).loop == "asyncio"
    with pytest.raises(UsageError, match="tokio"):
        parser.parse_args([*command, "--loop", "tokio"])
