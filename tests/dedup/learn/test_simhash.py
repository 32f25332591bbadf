"""The main-text fingerprint: the compiled SimHash gives the Python code's bits, and its
distances mean what the near-duplicate test needs them to mean."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.learn.simhash import Shingles, distance, text_print
from dedup.native import compiled
from tests.dedup.conftest import require_kernel

_R = random.Random(39)
VOCAB = [''.join(_R.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_R.randint(2, 9)))
         for _ in range(2000)]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


@pytest.fixture(params=["compiled", "python"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(compiled, "simhash", None)
    else:
        require_kernel()
    return request.param


def _both(fn):
    """``fn()`` with the kernel, then with the Python code."""
    require_kernel()
    got = fn()
    kernel, compiled.simhash = compiled.simhash, None
    try:
        return got, fn()
    finally:
        compiled.simhash = kernel


@pytest.mark.parametrize("text", [
    "", "   ", "a", "one two", "one two three", "Hello, World! 42 times",
    "Ünïcode wörds ñ 東京 tokyo", "x" * 300 + " tail", "a-b_c.d/e",
    "the quick brown fox jumps over the lazy dog " * 40,
])
@pytest.mark.parametrize("shingle", [1, 2, 3, 8])
def test_the_kernel_and_the_python_code_give_the_same_bits(text, shingle):
    got, want = _both(lambda: text_print(text, shingle))
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400), st.integers(1, 8))
def test_the_same_bits_for_any_text(text, shingle):
    got, want = _both(lambda: text_print(text, shingle))
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400), st.integers(1, 8))
def test_the_same_bits_for_any_bytes(data, shingle):
    """Every byte value, as the kernel's table of word bytes reads it: letters of both
    cases, digits, bytes of UTF-8 sequences (valid or not), controls, NUL."""
    got, want = _both(lambda: text_print(data + bytes(range(256)) + data.upper(), shingle))
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VOCAB[:40]), max_size=60), st.integers(1, 8),
       st.integers(1, 8))
def test_a_shingle_set_counts_as_the_python_code_does_for_any_widths(words, shingle, novel):
    """The kernel keeps each window's hash as the text goes (the ring of the last
    words' hashes wraps past 8 and 16 words); the Python code hashes every window."""
    texts = [" ".join(words), " ".join(reversed(words)), " ".join(words[: len(words) // 2])]

    def prints() -> list[tuple[int, int, int, int]]:
        host = Shingles()
        return [host.print(t, shingle, novel) for t in texts]

    got, want = _both(prints)
    assert got == want


def test_counts_past_255_shingles_are_exact():
    # the kernel counts bits in byte lanes spilled every 255 shingles
    rng = random.Random(1)
    for n in (253, 254, 255, 256, 257, 510, 511, 2000):
        text = _text(rng, n)
        got, want = _both(lambda text=text: text_print(text))
        assert got == want and got[1] == n - 2


def test_no_word_is_no_print_and_case_and_punctuation_do_not_count(impl):
    assert text_print("") == (0, 0)
    assert text_print("  ;; -- !! ") == (0, 0)
    assert text_print("Hello, World") == text_print("hello world")
    assert text_print("one two three four")[1] == 2  # shingles of three words


def test_a_copy_with_a_little_noise_is_near_and_other_texts_are_far(impl):
    rng = random.Random(7)
    near, far = [], []
    for _ in range(200):
        words = [rng.choice(VOCAB) for _ in range(400)]
        a = text_print(" ".join(words))[0]
        b = text_print(" ".join([*words, rng.choice(VOCAB)]))[0]  # one word added
        c = text_print(_text(rng, 400))[0]
        near.append(distance(a, b))
        far.append(distance(a, c))
    assert sorted(near)[len(near) // 2] <= 3  # the median copy is within 3 bits
    assert min(far) >= 12  # no two different texts anywhere near


def test_a_shingle_set_counts_what_a_page_brings_that_the_host_had_not(impl):
    rng = random.Random(3)
    host = Shingles()
    page = _text(rng, 100)
    fp, shingles, new, counted = host.print(page)
    assert (fp, shingles) == text_print(page) and new == counted == 96  # 5-word shingles
    assert host.print(page)[2:] == (0, 96)  # the same text again: nothing new
    month = "No events are scheduled here yet in May 2031 please check back later"
    host.print(month)
    # another month: the six shingles with its name or year are new
    assert host.print(month.replace("May 2031", "June 2032"))[2] == 6
    assert host.print(_text(rng, 50))[2] == 46  # another text: all of it
    assert len(host) == 96 + 9 + 6 + 46


def test_a_small_vocabulary_still_brings_new_shingles():
    """The sample site's pages: 60 words drawn from 19. Three-word shingles run out
    after a few hundred pages (6,859 in all); five-word ones do not."""
    rng = random.Random(5)
    vocab = VOCAB[:19]
    host = Shingles()
    new = [host.print(" ".join(rng.choice(vocab) for _ in range(60)))[2] for _ in range(2000)]
    assert min(new[-100:]) >= 40


def test_a_full_shingle_set_counts_what_it_does_not_hold_as_new(impl):
    rng = random.Random(4)
    host = Shingles(limit=10)
    page = _text(rng, 40)
    assert host.print(page)[2] == 36
    assert len(host) == 10
    assert host.print(page)[2] == 26  # only the ten it holds are known


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="shingle"):
        text_print("a b", 0)
    with pytest.raises(ValueError, match="shingle"):
        text_print("a b", 9)
    if compiled.simhash is not None:
        with pytest.raises(ValueError, match="limit"):
            compiled.simhash.Shingles(-1)
        with pytest.raises(ValueError, match="shingle"):
            compiled.simhash.Shingles().print(b"a", 3, 9)
        with pytest.raises(TypeError):
            compiled.simhash.simhash("text, not bytes", 3)


@pytest.mark.parametrize("text", ["plain ascii words here and there", "Ünïcode wörds ñ 東京",
                                  "a lone \ud800 surrogate and more words", "", "   "])
def test_a_hosts_set_reads_a_str_as_its_utf8_bytes(text):
    """The kernel reads a str's UTF-8 itself (a lone surrogate as surrogatepass writes
    it): the same answers as for the bytes, and as the Python set's."""
    data = text.encode("utf-8", "surrogatepass")
    got, want = _both(lambda: (Shingles().print(text), Shingles().print(data)))
    assert got == want and got[0] == got[1]


@pytest.mark.parametrize("limit", [1 << 22, 100, 64, 63])
def test_the_kernels_set_counts_as_the_python_set_across_its_batches(limit):
    """The kernel adds a page's shingles in batches of 64 (their slots fetched ahead):
    counts and contents as the Python set's, in text order, with a shingle repeated
    inside one page on both sides of a batch's edge and a limit reached mid-batch."""
    rng = random.Random(6)
    vocab = VOCAB[:12]
    pages = [" ".join(rng.choice(vocab) for _ in range(n))
             for n in (3, 60, 67, 68, 69, 131, 132, 133, 200, 1, 4)]
    pages += [p + " " + p for p in pages[:6]]

    def run() -> tuple[list[tuple[int, int, int, int]], int]:
        host = Shingles(limit=limit)
        return [host.print(p) for p in pages], len(host)

    got, want = _both(run)
    assert got == want
