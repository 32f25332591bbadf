"""Settings: defaults == config/default.toml, overlays, errors that name the key."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields

import pytest

from crawler.cli.args import crawl_settings
from crawler.cli.main import build_parser
from crawler.config.settings import ConfigError, Settings, load_settings, settings_from_dict
from dedup import CONFIRM_CACHE_SIZE
from tests.support.helpers import REPO

DEFAULT_TOML = REPO / "config" / "default.toml"


def test_every_knob_is_in_default_toml_with_the_same_default_and_vice_versa():
    documented = tomllib.loads(DEFAULT_TOML.read_text())
    defaults = Settings().to_dict()
    assert set(documented) == set(defaults)
    for section, values in defaults.items():
        assert set(documented[section]) == set(values), section
        for key, value in values.items():
            assert documented[section][key] == value, f"[{section}] {key}"
    # and loading the documented file changes nothing
    assert load_settings(DEFAULT_TOML) == Settings()


def test_the_confirm_cache_default_is_the_librarys():
    """A crawl sizes its confirm cache as a plain ``UrlSeen(dir)`` does (the size the
    page-by-page benchmarks measure), not a second number that drifts from it."""
    assert Settings().dedup.confirm_cache_size == CONFIRM_CACHE_SIZE


def test_config_file_overlays_only_the_keys_it_sets(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[crawl]\nmax_pages = 7\n[politeness]\ndelay = 2\n"
                   "[fetch]\nhtml_types = ['text/html']\n")
    s = load_settings(cfg)
    assert s.crawl.max_pages == 7
    assert s.politeness.delay == 2.0 and isinstance(s.politeness.delay, float)
    assert s.fetch.html_types == ("text/html",)
    assert s.crawl.max_depth == Settings().crawl.max_depth
    assert s.dedup == Settings().dedup


@pytest.mark.parametrize("text, fragment", [
    ("[crawl]\nmax_pagez = 1\n", "unknown key 'max_pagez' in [crawl]"),
    ("[crawling]\nmax_pages = 1\n", "unknown section [crawling]"),
    ("[crawl]\nmax_pages = 'ten'\n", "[crawl] max_pages must be an integer"),
    ("[crawl]\nhonor_nofollow = 1\n", "[crawl] honor_nofollow must be true or false"),
    ("[politeness]\nper_host = 0\n", "[politeness] per_host must be >= 1"),
    ("[dedup]\nerror_rate = 1.5\n", "[dedup] error_rate must be between 0 and 1"),
    ("[crawl]\nallow_domains = 'a.com'\n", "allow_domains must be a list of strings"),
    ("[crawl\n", "invalid TOML"),
    # a typo is told the nearest known name (difflib): within the section, the same key
    # in another section, a section
    ("[crawl]\nconcurency = 4\n", "unknown key 'concurency' in [crawl]; did you mean "
     "'concurrency'?"),
    ("[crawl]\ndelay = 0\n", "unknown key 'delay' in [crawl]; did you mean [politeness] delay?"),
    ("[crawl]\nuser_agnet = 'x'\n", "did you mean [fetch] user_agent?"),
    ("[fetch]\ntimeout = 3\n", "did you mean 'read_timeout' or 'total_timeout'?"),
    ("[dedupe]\ncapacity = 10\n", "unknown section [dedupe]; did you mean [dedup]?"),
])
def test_bad_config_files_are_errors_naming_the_key(tmp_path, text, fragment):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(fragment)) as info:
        load_settings(cfg)
    assert fragment in str(info.value)
    assert str(cfg) in str(info.value)


def test_a_key_near_no_known_one_gets_no_guess():
    with pytest.raises(ConfigError) as info:
        Settings().overlay({"crawl": {"zzzzzz": 1}})
    assert str(info.value).endswith("unknown key 'zzzzzz' in [crawl]")


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_frozen_config_round_trips():
    s = Settings().with_values(crawl={"max_pages": 3, "allow_domains": ["a.test"]},
                               fetch={"allow_private": True})
    assert settings_from_dict(s.to_dict()) == s
    with pytest.raises(ConfigError, match="unknown key 'gone'"):
        settings_from_dict({"crawl": {"gone": 1}})


def test_command_line_flags_override_the_config_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[crawl]\nmax_pages = 7\nmax_depth = 3\nallow_domains = ['a.test']\n"
                   "[politeness]\ndelay = 2.0\n")
    args = build_parser().parse_args([
        "crawl", "seeds.txt", "--state", "s", "--config", str(cfg), "--max-pages", "9",
        "--allow-domain", "*.B.test", "--delay", "0.5", "--per-host", "3", "--allow-private",
        "--concurrency", "5", "--warc", "out.warc"])
    s = crawl_settings(args)
    assert s.crawl.max_pages == 9  # flag wins
    assert s.crawl.max_depth == 3  # config kept
    assert s.crawl.allow_domains == ("a.test", "b.test")  # widened, normalized
    assert (s.politeness.delay, s.politeness.per_host, s.crawl.concurrency) == (0.5, 3, 5)
    assert s.fetch.allow_private is True
    assert s.output.warc.endswith("out.warc") and s.output.warc.startswith("/")
    assert [f.name for f in fields(s)] == list(s.to_dict())
