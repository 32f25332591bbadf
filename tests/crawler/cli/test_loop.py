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


async def _is_uvloop() -> bool:
    import uvloop

    return isinstance(asyncio.get_running_loop(), uvloop.Loop)


def test_auto_is_uvloop_when_installed_and_asyncio_turns_it_off():
    pytest.importorskip("uvloop")
    from crawler.cli import safeloop

    assert loop_factory("auto") is safeloop.new_event_loop  # uvloop, as safeloop runs it
    assert run(_is_uvloop(), "auto") and run(_is_uvloop(), "uvloop")
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


async def _collector() -> tuple[tuple[int, int, int], int]:
    import gc

    return gc.get_threshold(), gc.get_freeze_count()


@pytest.mark.parametrize("kind", ["auto", "asyncio"])
def test_a_crawl_runs_with_the_collector_tuned_and_restores_it(kind):
    """The objects of start-up frozen and young collections ~14x rarer while the loop
    runs (~5% of a short crawl's CPU went to the collector); as before afterwards."""
    import gc

    from crawler.cli.collector import GEN0_THRESHOLD

    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    (gen0, *older), frozen_inside = run(_collector(), kind)
    assert gen0 >= GEN0_THRESHOLD and tuple(older) == before[1:]
    assert frozen_inside > frozen
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_the_command_imports_run_with_the_collector_paused(monkeypatch, capsys):
    """Building the parser imports the command's modules (~100 young collections of
    objects that all live on); the collector is back on afterwards."""
    import gc

    import crawler.cli.main as cli

    seen = []
    real = cli.build_parser

    def spy(argv):
        seen.append(gc.isenabled())
        return real(argv)

    monkeypatch.setattr(cli, "build_parser", spy)
    assert gc.isenabled()
    assert cli.main(["crawl", "--help"]) == 0
    assert seen == [False] and gc.isenabled()
