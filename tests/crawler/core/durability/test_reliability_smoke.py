"""bench/reliability.py at toy size (3 kills, a small site), so the kill -9 loop cannot rot.

The harness runs as a child process, as ``make reliability`` runs it; it kills
and resumes real ``python -m crawler`` processes. Its checks of the output files
are tested on their own first, on WARC files written by warcio (not by the
crawler), so that a zero from the loop means "none found", not "cannot see".
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.warcwriter import WARCWriter

BENCH = Path(__file__).resolve().parents[4] / "bench"
_spec = importlib.util.spec_from_file_location("reliability_checks",
                                               BENCH / "reliability_checks.py")
checks = importlib.util.module_from_spec(_spec)
sys.modules["reliability_checks"] = checks  # dataclasses look their module up there
_spec.loader.exec_module(checks)

KILLS = 3  # with --seed 3 the first is "early", while `crawl` creates its state dir
CONCURRENCY = 8


def warc_record(uri: str, body: bytes) -> bytes:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False)
    writer.write_record(writer.create_warc_record(uri, "resource", payload=io.BytesIO(body),
                                                  warc_headers_dict={}, http_headers=None))
    return out.getvalue()


# -- the checks, on files made to hold exactly one known fault ---------------------------------

def test_an_intact_warc_has_no_torn_and_no_duplicate_record(tmp_path):
    path = tmp_path / "a.warc"
    path.write_bytes(warc_record("http://h/a", b"<p>a</p>") + warc_record("http://h/b", b"b"))
    got = checks.check_warc(path)
    assert (got.segments, got.torn, checks.duplicates(got.targets)) == (2, 0, 0)
    assert (got.sequential_records, got.sequential_intact) == (2, 2)
    assert got.sequential_reached_end is True


def test_a_torn_record_followed_by_appended_ones_is_counted_and_stops_a_reader(tmp_path):
    a, b, c = (warc_record(f"http://h/{x}", x.encode() * 500) for x in "abc")
    path = tmp_path / "torn.warc"
    path.write_bytes(a + b[: len(b) // 2] + c + a)  # b torn mid-payload, then c and a again
    got = checks.check_warc(path)
    assert got.segments == 4 and got.torn == 1
    assert got.targets == {"http://h/a": 2, "http://h/c": 1}
    assert checks.duplicates(got.targets) == 1
    # one warcio pass reads b's declared length into c: b is short or fails its
    # digest, and c is lost to that reader (a and the appended a are whole)
    assert got.sequential_intact == 2


def pair(uri: str, body: bytes, *, gzip: bool = True) -> tuple[bytes, bytes]:
    """A request record pointing at a response record (each its own gzip member)."""
    out = io.BytesIO()
    w = WARCWriter(out, gzip=gzip)
    resp = w.create_warc_record(uri, "response", payload=io.BytesIO(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + body))
    req = w.create_warc_record(uri, "request", payload=io.BytesIO(
        b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"))
    req.rec_headers.add_header("WARC-Concurrent-To", resp.rec_headers.get_header(
        "WARC-Record-ID"))
    w.write_record(req)
    first = out.getvalue()
    w.write_record(resp)
    return first, out.getvalue()[len(first):]


def test_gzip_members_torn_duplicated_and_unpaired_are_counted_across_files(tmp_path):
    (d := tmp_path / "warc").mkdir()
    a, b, c = (pair(f"http://h/{x}", x.encode() * 5000) for x in "ab" "c")
    (d / "crawl-00000.warc.gz").write_bytes(a[0] + a[1] + b[0] + b[1][: len(b[1]) // 2]
                                            + c[0] + c[1])  # b's response torn, c after it
    (d / "crawl-00001.warc.gz").write_bytes(c[0] + c[1] + a[1])  # c again; a's alone
    got = checks.check_warc(d)
    assert (got.files, got.segments, got.torn) == (2, 9, 1)
    assert got.targets == {"http://h/a": 2, "http://h/c": 2}
    assert got.unpaired == 1  # b's request names a torn record
    assert got.missing({"http://h/a", "http://h/b"}) == ["http://h/b"]
    assert got.sequential_reached_end is False  # one pass stops at the torn member


def test_a_record_whose_payload_was_overwritten_fails_its_digest(tmp_path):
    rec = warc_record("http://h/a", b"x" * 100)
    path = tmp_path / "flip.warc"
    path.write_bytes(rec.replace(b"x" * 100, b"y" * 100))
    assert checks.check_warc(path).torn == 1


def test_pages_duplicates_and_torn_lines_are_counted(tmp_path):
    path = tmp_path / "pages.jsonl"
    path.write_text('{"url": "http://h/a"}\n{"url": "http://H/a#x"}\n{"url": "http://h/b"}\n'
                    '{"url": "http://h/c", "sta\n')
    got = checks.check_pages(path)
    assert (got.lines, got.torn_lines, checks.duplicates(got.urls)) == (4, 1, 1)
    assert got.lost({"http://h/a", "http://h/b", "http://h/z"}) == ["http://h/z"]


# -- the loop --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reliability") / "result.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "reliability.py"), "--kills", str(KILLS), "--seed", "3",
         "--pages", "40", "--hosts", "2", "--concurrency", str(CONCURRENCY), "--out", str(out)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr  # 1: it found something (the tests below name it)
    got = json.loads(out.read_text())
    assert proc.returncode == (0 if got["ok"] else 1)
    assert "lost URLs:" in proc.stderr and json.loads(proc.stdout)["counts"] == got["counts"]
    return got


def test_every_kill_landed_and_the_crawl_finished(result):
    assert result["finished"] is True
    assert result["kills_sent"] == KILLS
    assert sum(r["killed"] for r in result["runs"]) == KILLS
    assert result["runs"][-1]["rc"] == 0 and not result["runs"][-1]["killed"]


def test_no_url_is_lost(result):
    assert result["counts"]["lost_urls"] == 0, result["lost_sample"]


def test_no_state_dir_is_wedged(result):
    assert result["counts"]["wedged_state_dirs"] == 0, result["wedged"]


def test_refetches_stay_within_what_was_in_flight(result):
    assert result["in_flight_bound"] == KILLS * CONCURRENCY
    assert result["counts"]["duplicate_fetches"] <= result["in_flight_bound"]


def test_no_duplicate_pages_line_or_warc_record(result):
    c = result["counts"]
    assert (c["duplicate_lines"], c["duplicate_warc_records"]) == (0, 0)


def test_no_torn_warc_record_or_pages_line(result):
    c = result["counts"]
    assert (c["torn_warc_records"], c["torn_lines"]) == (0, 0)
    seq = result["warc"]["sequential_read"]
    assert seq["reached_end"] is True and seq["intact"] == result["warc"]["records_found"]
