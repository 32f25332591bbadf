"""``crawler.Crawler``: a crawl from Python, the one code path ``bloomcrawl crawl`` and
``bloomcrawl resume`` run on too.

Why one class for both: whatever the command line does (resume, politeness,
robots.txt, the seen-test, retries, crash safety) a program gets by the same
code, and a page handler runs the same way from either. Options are named as
the command line's long options with underscores (``--max-pages`` is
``max_pages``) and turned into ``Settings`` by one function,
``settings_from_options``, which the command line calls too.

Why pages are handed over after their group commit: a page the loop body sees
is durable (its record, items and links are committed), and a slow loop body
slows the crawl instead of piling pages up in memory (at most about
``concurrency`` pages wait for it).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from crawler.config.scope import normalize_domain
from crawler.config.settings import ConfigError, Settings, did_you_mean, load_settings
from crawler.core.run.engine import Engine, Watcher
from crawler.core.run.page import Follow, Handler, HandlerError, Hooks, OnError, Page
from crawler.core.run.progress import Progress
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.reopen import finish_rewrite, reopen_refused
from crawler.core.state.state import (
    CrawlError,
    Seeds,
    create_crawl,
    open_crawl,
    readmit_seeds,
    store_changes,
)
from crawler.net.fetch import check_env_proxies
from crawler.wire.owner import owner_of
from dedup import UrlSeen, is_state_dir

if TYPE_CHECKING:
    from crawler.config.scope import Scope
    from crawler.wire.transport import RedisTransport

__all__ = ["CRAWL_OPTIONS", "RESUME_OPTIONS", "CrawlError", "Crawler", "HandlerError", "Page",
           "load_callable", "settings_from_options"]

# The crawl options: the command line's long options, with underscores.
CRAWL_OPTIONS = (
    "config", "max_pages", "max_depth", "allow_domain", "include", "exclude", "sitemaps",
    "no_sitemaps", "no_learn", "concurrency", "per_host", "delay", "allow_private", "user_agent",
    "header", "cookies", "proxy", "max_bytes", "parse_limit", "warc", "warc_max_size",
    "warc_content_type",
)
# What a resume may change (stored as the crawl's new values), and where it lives.
RESUME_OPTIONS = {
    "max_pages": ("crawl", "max_pages"), "max_depth": ("crawl", "max_depth"),
    "concurrency": ("crawl", "concurrency"), "per_host": ("politeness", "per_host"),
    "delay": ("politeness", "delay"), "proxy": ("fetch", "proxy"),
    "max_bytes": ("fetch", "max_bytes"), "parse_limit": ("fetch", "parse_limit"),
    # widens only: the URLs refused as private addresses are fetched (crawler.core.state.reopen)
    "allow_private": ("fetch", "allow_private"),
}
_LISTS = ("allow_domain", "include", "exclude", "header")


def _given(value: Any) -> bool:
    """An option counts as given unless None, False or empty (the command line's
    defaults for a flag not used)."""
    return value is not None and value is not False and value != [] and value != ()


def _strings(name: str, value: Any) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    for x in items:
        if not isinstance(x, str):
            raise ConfigError(f"{name}: expected strings, got {type(x).__name__}: {x!r:.80}")
    return items


def check_options(options: Mapping[str, Any], *, resume: bool = False) -> dict[str, Any]:
    """The given options (``_given``); TypeError naming an unknown one, and for a
    resume, CrawlError naming one frozen at the crawl's start."""
    for name in options:
        if name not in CRAWL_OPTIONS:
            hint = did_you_mean(name, CRAWL_OPTIONS)
            raise TypeError(f"unknown crawl option {name!r}" + (f"; {hint}" if hint else
                            f" (the options are the command line's, with underscores: "
                            f"{', '.join(CRAWL_OPTIONS)})"))
    given = {k: v for k, v in options.items() if _given(v)}
    if resume:
        frozen = [k for k in given if k not in RESUME_OPTIONS]
        if frozen:
            raise CrawlError(f"a resume cannot change {', '.join(frozen)}: frozen when the "
                             "crawl started (a resume may change "
                             f"{', '.join(RESUME_OPTIONS)})")
    return given


def settings_from_options(options: Mapping[str, Any]) -> Settings:
    """Settings for a new crawl: the defaults < ``config`` (a TOML file, or its tables
    as a dict: ``{"dedup": {"capacity": 200_000}}``) < the options.

    List options (``allow_domain``, ``include``, ``exclude``, ``header``) take a
    string or a list and add to the config file's lists. ConfigError names a bad
    value; TypeError an unknown option."""
    o = check_options(options)
    config = o.get("config")
    settings = (Settings().overlay(config, source="config") if isinstance(config, Mapping)
                else load_settings(config))
    crawl: dict[str, Any] = {k: o[k] for k in ("max_pages", "max_depth", "concurrency")
                             if k in o}
    lists = {k: _strings(k, o[k]) for k in _LISTS if k in o}
    if "allow_domain" in lists:
        try:
            domains = [normalize_domain(d) for d in lists["allow_domain"]]
        except ValueError as exc:
            raise ConfigError(f"allow_domain: {exc}") from None
        crawl["allow_domains"] = list(dict.fromkeys([*settings.crawl.allow_domains,
                                                     *domains]))
    for key in ("include", "exclude"):
        if key in lists:
            crawl[key] = list(dict.fromkeys([*getattr(settings.crawl, key), *lists[key]]))
    if o.get("sitemaps") and o.get("no_sitemaps"):
        raise ConfigError("sitemaps and no_sitemaps (--sitemaps, --no-sitemaps): give one")
    if o.get("sitemaps") or o.get("no_sitemaps"):
        crawl["sitemaps"] = bool(o.get("sitemaps"))
    politeness = {k: o[k] for k in ("per_host", "delay") if k in o}
    learn: dict[str, Any] = {"enabled": False} if o.get("no_learn") else {}
    fetch: dict[str, Any] = {"allow_private": True} if o.get("allow_private") else {}
    if "user_agent" in o:
        fetch["user_agent"] = str(o["user_agent"]).strip()
    if "header" in lists:
        fetch["headers"] = [*settings.fetch.headers, *lists["header"]]
    if o.get("cookies"):
        fetch["cookies"] = True
    for key in ("max_bytes", "parse_limit"):
        if key in o:
            fetch[key] = o[key]
    if "proxy" in o:
        fetch["proxy"] = o["proxy"]
    elif not settings.fetch.proxy:
        _check_env_proxies()
    warc = o.get("warc") or settings.output.warc
    # frozen absolute: a resume may run from another directory
    output: dict[str, Any] = {"warc": str(Path(warc).resolve())} if warc else {}
    if "warc_max_size" in o:
        output["warc_max_size"] = o["warc_max_size"]
    if "warc_content_type" in o:
        try:
            re.compile(o["warc_content_type"])
        except (re.error, TypeError) as exc:
            raise ConfigError(f"warc_content_type {o['warc_content_type']!r}: {exc}") from None
        output["warc_content_types"] = o["warc_content_type"]
    return settings.with_values(crawl=crawl, politeness=politeness, fetch=fetch, output=output,
                                learn=learn)


def _continued(stored: Settings, asked: Settings, given: Mapping[str, Any]
               ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """What a script run again on its crawl asks of it: ``(changes, refused)``. The
    values ``RESUME_OPTIONS`` may change that it gives (or its config sets) are
    changes; any other value it sets (an option or a config key off its default)
    must be the one the crawl was started with, or it is refused (named)."""
    default, have, want = Settings().to_dict(), stored.to_dict(), asked.to_dict()
    resumable = {where: name for name, where in RESUME_OPTIONS.items()}
    changes: dict[str, dict[str, Any]] = {}
    refused = []
    for section, values in want.items():
        for key, value in values.items():
            old = have.get(section, {}).get(key)
            if value == old:
                continue
            name = resumable.get((section, key))
            if name is not None and (name in given or value != default[section][key]):
                changes.setdefault(section, {})[key] = value
            elif name is None and value != default[section][key]:
                refused.append(f"{section}.{key} = {value!r} (the crawl's: {old!r})")
    return changes, refused


def _name_of(fn: Any) -> str:
    """Where a hook given as a Python object was defined, for the user: module.name."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _check_env_proxies() -> None:
    try:
        check_env_proxies()  # never crawl direct when a proxy was meant
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load_callable(spec: str) -> Any:
    """``module:function`` (``package.module:obj.attr``) imported; the current directory
    is searched first, as ``python -m`` would. ConfigError says what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{spec!r}: expected module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{spec!r}: cannot import {module_name}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{spec!r}: {module_name} has no {attr}") from None
    if not callable(obj):
        raise ConfigError(f"{spec!r}: not callable")
    return obj


_END = object()


class Crawler:
    """A crawl of a state directory, from Python.

    ``Crawler(seeds, state=DIR, **options)`` starts a new crawl in DIR (new or
    empty); ``Crawler(state=DIR)`` resumes the crawl in DIR (and may change the
    ``RESUME_OPTIONS``: ``max_pages``, ``max_depth``, ``concurrency``, ``per_host``,
    ``delay``, ``proxy``, ``max_bytes``, ``parse_limit``, stored as its new values;
    ``allow_private=True`` also puts the URLs refused as private addresses back in
    the frontier: ``reopened`` says how many).
    ``seeds``: a URL, a list of URLs, or a seeds file (a ``pathlib.Path``: one URL
    per line, ``#`` comments).

    Use it as ``async with Crawler(...) as crawl:`` and either iterate
    (``async for page in crawl``: each fetched page once its group is committed)
    or ``await crawl.run()`` (to the end, returning the summary figures).

    Run again on the state directory of a crawl it started (the same script after a
    crash or a stop), ``Crawler(seeds, state=DIR, ...)`` continues that crawl with
    the script's handler and follow: its seeds go through the seen-test again (new
    ones are queued), the ``RESUME_OPTIONS`` it gives are stored as the crawl's new
    values, and any other option that differs from the crawl's is refused
    (``CrawlError`` naming it: the scope, the filter and the requests are frozen).

    ``handler(page)`` (sync or async) returns items — a dict, an iterable (or
    async iterable) of dicts, or None — written to DIR/items.jsonl with the
    page's commit: each page's items exactly once, across kill -9 and resume.
    ``follow(page)`` returns the URLs to enqueue (relative ones resolve against
    the page; out-of-scope ones are dropped); default: all of ``page.links``.
    Either may be given as ``"module:function"``; a crawl started so resumes
    with them when a resume names none. Given as Python objects they cannot be
    stored: a resume that does not give them again (``Crawler(state=DIR)``,
    ``bloomcrawl resume DIR`` without ``--handler``/``--follow``) is refused with a
    ``CrawlError`` naming them, rather than run without them.

    A handler or follow that raises: the traceback goes into the page's
    pages.jsonl record (``handler_error``), is counted (``handler_errors`` in the
    summary) and the crawl goes on; with ``on_error="stop"`` the crawl stops
    cleanly, leaving that page queued, and ``HandlerError`` is raised (a resume
    handles that page again).

    ``fleet``: the crawl is one worker of a fleet, with this identity
    (``crawler.fleet.identity.worker_meta``: crawl id, W, I, the Redis URL without
    its password). Such a crawl admits only the seeds whose host it owns and runs
    with the fleet's transport (``run(transport=...)``); ``crawler.fleet.join``
    joins the fleet and runs it. The handler runs in every worker, each writing
    the items of its own pages to its own DIR/items.jsonl.
    """

    def __init__(self, seeds: Seeds | Iterable[str] | None = None, *, state: str | os.PathLike[str],
                 handler: Handler | str | None = None, follow: Follow | str | None = None,
                 on_error: OnError | None = None, progress: bool | Progress = False,
                 handle_signals: bool = False, watch: Watcher | None = None,
                 fleet: Mapping[str, Any] | None = None, **options: Any) -> None:
        """Checks everything that can be checked without touching ``state``: unknown
        options (TypeError), bad values (ConfigError), a handler that cannot be
        imported. ``progress``: the status line and summary on stderr;
        ``handle_signals``: SIGINT/SIGTERM stop the crawl gracefully (the command
        line's behaviour; a second one exits at once); ``watch(engine)``: an async
        context manager entered before the crawl starts and left after it ends (the
        dashboard, ``--ui``)."""
        self.state_dir = Path(state)
        self._resume = seeds is None
        if isinstance(seeds, str):
            seeds = [seeds]
        elif seeds is not None and not isinstance(seeds, os.PathLike):
            seeds = list(seeds)
        self._seeds: Seeds | None = seeds if not isinstance(seeds, os.PathLike) \
            else Path(seeds)
        self._options = check_options(options, resume=self._resume)
        self._settings: Settings | None = None
        if not self._resume:
            self._settings = settings_from_options(self._options)
        if on_error not in (None, "continue", "stop"):
            raise ValueError(f"on_error must be 'continue' or 'stop', not {on_error!r}")
        self._specs = {name: spec for name, spec in (("handler", handler), ("follow", follow))
                       if isinstance(spec, str)}
        if self._specs:
            self._specs["on_error"] = on_error or "continue"
        self._handler = load_callable(handler) if isinstance(handler, str) else handler
        self._follow = load_callable(follow) if isinstance(follow, str) else follow
        self._on_error_given = on_error is not None
        self._on_error: OnError = on_error or "continue"
        self._explicit_hooks = handler is not None or follow is not None
        self._progress = progress
        self._signals = handle_signals
        self._watch = watch
        self.fleet = dict(fleet) if fleet is not None else None
        self.problems: list[str] = []  # seed lines skipped (bad, or out of scope)
        # URLs refused as private addresses put back in the frontier by this resume
        self.reopened = 0
        self.summary: dict[str, Any] | None = None  # the figures, once the crawl ended
        self._seen: UrlSeen | None = None
        self._failed = False  # the crawl raised: close() commits nothing more
        self._scope: Any = None
        self._engine: Engine | None = None
        self._task: asyncio.Task[dict[str, Any]] | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._room = asyncio.Event()
        self._gone = False

    # -- the state directory -------------------------------------------------------------

    @property
    def seen(self) -> UrlSeen:
        """The open state directory (``open`` first)."""
        if self._seen is None:
            raise RuntimeError("the crawl's state directory is not open")
        return self._seen

    @property
    def scope(self) -> Scope:
        """The crawl's scope (``open`` first)."""
        if self._seen is None:
            raise RuntimeError("the crawl's state directory is not open")
        return self._scope  # type: ignore[no-any-return]

    @property
    def settings(self) -> Settings:
        """The crawl's settings (for a resume: known once ``open``)."""
        if self._settings is None:
            raise RuntimeError("a resumed crawl's settings are known once it is open")
        return self._settings

    def open(self) -> Self:
        """Create the crawl (seeds admitted, settings frozen) or reopen it to resume.
        Blocking file I/O: ``async with`` calls it; call it yourself first to see
        ``problems`` before the crawl runs."""
        if self._seen is not None:
            return self
        if self._resume:
            seen, settings, scope = open_crawl(self.state_dir)
            state = CrawlState(seen.records)
            try:
                self._check_identity(state.fleet())
                changes: dict[str, dict[str, Any]] = {}
                for name, value in self._options.items():
                    section, key = RESUME_OPTIONS[name]
                    changes.setdefault(section, {})[key] = value
                finish_rewrite(seen)  # before anything reads pages.jsonl
                if changes:
                    settings = store_changes(seen, settings, changes)
                if settings.fetch.allow_private:
                    self.reopened = reopen_refused(seen)
                if not settings.fetch.proxy:
                    _check_env_proxies()
                self._stored_hooks(state.hooks())
                if self._explicit_hooks:  # the crawl's hooks from now on
                    state.set_hooks(self._hooks_meta())
                    seen.commit()
            except BaseException:
                seen.close()
                raise
            self._settings = settings
        elif self.fleet is None and is_state_dir(self.state_dir):
            seen, scope = self._continue()
        else:
            assert self._seeds is not None
            fleet = self.fleet
            if fleet is None:
                seen, scope, self.problems = create_crawl(
                    self.state_dir, self.settings, self._seeds, hooks=self._hooks_meta())
            else:
                workers, me = int(fleet["workers"]), int(fleet["worker_id"])
                seen, scope, self.problems = create_crawl(
                    self.state_dir, self.settings, self._seeds, hooks=self._hooks_meta(),
                    crawl_id=fleet["crawl_id"], meta=fleet,
                    owns=lambda host: owner_of(host, workers) == me)
        self._seen, self._scope = seen, scope
        return self

    def _continue(self) -> tuple[UrlSeen, Scope]:
        """Seeds given for a directory that holds a crawl: the script that started it,
        run again. Its settings must agree with the crawl's (``_continued``); its
        seeds are admitted again; its hooks are the crawl's from now on."""
        assert self._seeds is not None and self._settings is not None
        seen, settings, scope = open_crawl(self.state_dir)
        state = CrawlState(seen.records)
        try:
            self._check_identity(state.fleet())
            changes, refused = _continued(settings, self._settings, self._options)
            if refused:
                raise CrawlError(
                    f"{self.state_dir} holds a crawl that this one would change: "
                    f"{'; '.join(refused)}. What decides the scope, the filter and the "
                    "requests is frozen when a crawl starts (a resume may change "
                    f"{', '.join(RESUME_OPTIONS)}); start it in another state directory")
            finish_rewrite(seen)  # before anything reads pages.jsonl
            if changes:
                settings = store_changes(seen, settings, changes)
            if settings.fetch.allow_private:
                self.reopened = reopen_refused(seen)
            if not settings.fetch.proxy:
                _check_env_proxies()
            self._stored_hooks(state.hooks())
            self.problems = readmit_seeds(seen, settings, scope, self._seeds)
            if self._explicit_hooks:
                state.set_hooks(self._hooks_meta())
                seen.commit()
        except BaseException:
            seen.close()
            raise
        self._settings = settings
        return seen, scope

    def _hooks_meta(self) -> dict[str, Any] | None:
        """What ``CrawlState.hooks`` keeps of the hooks: names given as ``module:function``
        (a resume imports them), and under "python" the ones given as Python objects
        (a resume must be given them again)."""
        meta: dict[str, Any] = dict(self._specs)
        python = {name: _name_of(fn) for name, fn in (("handler", self._handler),
                                                      ("follow", self._follow))
                  if fn is not None and name not in self._specs}
        if python:
            meta["python"] = python
            meta.setdefault("on_error", self._on_error)
        return meta or None

    def _check_identity(self, stored: Mapping[str, Any] | None) -> None:
        """A fleet worker's state directory resumes only as that worker, a single
        process's only as a single process."""
        if stored is None and self.fleet is not None:
            raise CrawlError(f"{self.state_dir} is a single-process crawl, not a fleet "
                             "worker's")
        if stored is not None and self.fleet is None:
            raise CrawlError(f"{self.state_dir} is a fleet worker's state directory: "
                             f"resume it with 'bloomcrawl resume {self.state_dir}'")
        if stored is not None and self.fleet is not None:
            ids = ("crawl_id", "workers", "worker_id")
            if [stored[k] for k in ids] != [self.fleet[k] for k in ids]:
                raise CrawlError(f"{self.state_dir} is worker {stored['worker_id']} of "
                                 f"{stored['workers']} in crawl {stored['crawl_id']}, not "
                                 f"worker {self.fleet['worker_id']} of "
                                 f"{self.fleet['workers']} in {self.fleet['crawl_id']}")

    def _stored_hooks(self, stored: Mapping[str, Any]) -> None:
        """A resume that names no handler or follow runs the ones the crawl was
        started with by name (``module:function``); one started with Python objects
        is refused unless it is given each of them again."""
        python = stored.get("python") or {}
        missing = {name: python[name] for name in ("handler", "follow")
                   if name in python
                   and (self._handler if name == "handler" else self._follow) is None}
        if missing and self._seeds is None:
            given = ", ".join(f"{name}={where}" for name, where in missing.items())
            flags = " ".join(f"--{name} MODULE:FUNCTION" for name in missing)
            raise CrawlError(
                f"{self.state_dir} was started from Python with {given}: Python objects "
                "that a resume cannot import, and it will not run without them (pages "
                "would get no items, and links no follow rule). Run the script that "
                "started it again (it continues the crawl), or name them: 'bloomcrawl "
                f"resume {self.state_dir} {flags}' (from Python: Crawler(state=DIR, "
                f"{', '.join(f'{n}=...' for n in missing)}))")
        if self._explicit_hooks or not stored:
            return
        if stored.get("handler"):
            self._handler = load_callable(stored["handler"])
        if stored.get("follow"):
            self._follow = load_callable(stored["follow"])
        if not self._on_error_given and stored.get("on_error") in ("continue", "stop"):
            self._on_error = stored["on_error"]  # type: ignore[assignment]

    def close(self) -> None:
        """Close the state directory (the crawl must not be running). After a crawl that
        failed (an I/O error, say), what it had not committed is discarded, as a kill -9
        would: a group of pages is committed whole or not at all."""
        if self._task is not None and not self._task.done():
            raise RuntimeError("the crawl is running: stop it and wait for it first")
        if self._seen is not None:
            self._seen.close(commit=not self._failed)
            self._seen = None

    async def __aenter__(self) -> Self:
        return self.open()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        """A crawl still running (the loop was left early, or raised) is stopped
        gracefully first: what was fetched is committed, the rest resumes."""
        try:
            if self._task is not None and not self._task.done():
                self._let_go()
                self.stop()
                try:
                    await self._task
                except Exception:
                    if exc is None:
                        raise
        finally:
            self.close()

    # -- running -------------------------------------------------------------------------

    def _start(self, deliver: bool, transport: RedisTransport | None = None
               ) -> asyncio.Task[dict[str, Any]]:
        if self._task is not None:
            raise RuntimeError("a Crawler runs once; make a new one to resume")
        if (self.fleet is None) != (transport is None):
            raise RuntimeError("a fleet worker runs with its fleet's transport, and only "
                               "a fleet worker does (crawler.fleet.join)")
        self.open()
        assert self._seen is not None and self._settings is not None
        settings = self._settings
        state = CrawlState(self._seen.records)
        if self.fleet is not None and state.fleet() != self.fleet:
            # joined through another Redis URL: remember it (without a password)
            state.set_fleet(self.fleet)
            self._seen.commit()
        hooks = None
        if self._handler is not None or self._follow is not None or deliver:
            hooks = Hooks(self._handler, self._follow, on_error=self._on_error,
                          deliver=self._deliver if deliver else None)
        progress = self._progress
        if not isinstance(progress, Progress):
            progress = Progress(interval=settings.output.progress_interval,
                                plain_interval=settings.output.plain_progress_interval,
                                enabled=bool(progress))
        self._engine = Engine(self._seen, settings, self._scope, progress=progress,
                              hooks=hooks, transport=transport)
        self._task = asyncio.create_task(self._crawl(self._engine), name="bloomcrawl-crawl")
        return self._task

    async def _crawl(self, engine: Engine) -> dict[str, Any]:
        try:
            if self._watch is None:
                self.summary = await engine.run(install_signals=self._signals)
            else:
                async with self._watch(engine):
                    self.summary = await engine.run(install_signals=self._signals)
            return self.summary
        except BaseException:
            self._failed = True
            raise
        finally:
            if self._queue is not None:
                self._queue.put_nowait(_END)

    async def run(self, *, transport: RedisTransport | None = None) -> dict[str, Any]:
        """Crawl to the end (the frontier is empty, ``max_pages`` is reached, or
        ``stop``); the summary figures (``outcome``, ``fetched``, ``failed``, ...,
        ``items`` and ``handler_errors`` with a handler). Opens (and then closes)
        the state directory when not used inside ``async with``. ``transport``: a
        fleet worker's, connected, its outbox attached (``crawler.fleet.join``);
        the crawl ends when the whole fleet is done."""
        owned = self._seen is None
        try:
            return await self._start(deliver=False, transport=transport)
        finally:
            if owned:
                self.close()

    def stop(self, reason: str = "stopped") -> None:
        """Stop gracefully: no new URL is taken, fetches in flight finish and are
        committed; the crawl resumes from there."""
        if self._engine is not None:
            self._engine.stop(reason)

    def __aiter__(self) -> Self:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._room.set()
            self._start(deliver=True)
        return self

    async def __anext__(self) -> Page:
        assert self._queue is not None and self._task is not None
        page = await self._queue.get()
        if self._queue.qsize() < self._backlog():
            self._room.set()
        if page is _END:
            self._queue.put_nowait(_END)  # a second loop ends at once too
            await self._task  # the crawl's error, if it had one
            raise StopAsyncIteration
        return page  # type: ignore[no-any-return]

    def _backlog(self) -> int:
        return self._settings.crawl.concurrency if self._settings is not None else 32

    async def _deliver(self, page: Page) -> None:
        """A committed page for the loop; its worker waits while the loop is behind."""
        if self._gone or self._queue is None:
            return
        self._queue.put_nowait(page)
        if self._queue.qsize() >= self._backlog():
            self._room.clear()
            await self._room.wait()

    def _let_go(self) -> None:
        """Nobody reads pages any more: workers no longer wait for the loop."""
        self._gone = True
        self._room.set()
