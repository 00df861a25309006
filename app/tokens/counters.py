"""Text token counters."""

import functools
import logging
import math
import re
from collections.abc import Iterator
from typing import Protocol

import tiktoken

from app.tokens.encodings import (
    ENCODING_NAMES,
    EncodingUnavailable,
    encoding_for_model,
    load_encoding,
)

log = logging.getLogger(__name__)

# Hiragana, katakana (full and half width) and CJK ideographs: what the heuristic counts as
# Japanese.
_JAPANESE_RUNS = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]+")


class TextCounter(Protocol):
    name: str

    def count_text(self, text: str) -> int:
        """Tokens of a piece of text."""
        ...


class HeuristicCounter:
    """The original design's estimate: characters / 4, or / 2 when half or more of them are
    Japanese."""

    name = "heuristic"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        japanese = sum(map(len, _JAPANESE_RUNS.findall(text)))
        divisor = 2 if japanese * 2 >= len(text) else 4
        return math.ceil(len(text) / divisor)


# Longest piece handed to tiktoken at once; longer text is counted in segments of at most this
# many characters. tiktoken slows down on long runs without whitespace (8 MB of one letter: 5.5 s,
# of ".": 8.5 s; ordinary text runs at about 8 MB/s) and panics on a whitespace run of about a
# million characters. Segments also bound the token list held in memory.
SEGMENT_CHARS = 8192

# Cuts that cannot change how either pattern pretokenises, so segment counts add up to the exact
# count. A piece never holds a non-space and then a space or tab, nor a newline and then a
# non-space; a letter or digit ends its piece before ASCII punctuation other than "'" (the
# contractions), and an ASCII letter before a digit or the reverse. o200k's punctuation pieces
# take trailing newlines and slashes (".\n/"), so we cut before such a "/" only after a letter or
# digit. Python's [^\W_] is exactly \p{L} and \p{N}; its \s contains Unicode's White_Space.
_EXACT_CUT = re.compile(
    r"\S(?=[ \t])"  # before a space or tab that follows a non-space
    r"|\n(?=[^\s/]|[ \t]+\S)"  # after a newline followed by a non-space (maybe indented)
    r"|(?<=[^\W_])\n(?=/)"
    r"|[^\W_](?=[!-&(-/:-@\[-`{-~])"  # a letter or digit, then ASCII punctuation but "'"
    r"|[A-Za-z](?=[0-9])|[0-9](?=[A-Za-z])"
)
# How far past a window the newline rule may look for the end of an indentation.
_LOOKAHEAD_SLACK = 256


def segments(text: str, limit: int = SEGMENT_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``limit`` characters, cut exactly where possible.

    Only a run of more than ``limit`` characters with no exact cut (one character repeated, words
    or CJK text glued together with no space, punctuation or line break) is cut hard, at the
    limit. A hard cut can move the total by a few tokens (measured: usually 0 to +2, at worst -3
    to +4), once per ``limit`` characters of such a run. All other text is counted exactly.
    """
    start, end_of_text = 0, len(text)
    while end_of_text - start > limit:
        end = start + limit
        scan_end = min(end_of_text, end + _LOOKAHEAD_SLACK)
        # A cut in the second half of the window keeps segments long; the whole window is scanned
        # only when that half has none.
        found = _EXACT_CUT.search(text, start + limit // 2, scan_end)
        if found is None or found.end() > end:
            found = None
            for match in _EXACT_CUT.finditer(text, start, scan_end):
                if match.end() > end:
                    break
                found = match
        cut = end if found is None else found.end()
        yield text[start:cut]
        start = cut
    yield text[start:]


class TiktokenCounter:
    """Exact BPE counts. Special tokens in the text ("<|endoftext|>") count as ordinary text."""

    def __init__(self, encoding: tiktoken.Encoding, *, segment_chars: int = SEGMENT_CHARS) -> None:
        self.name = encoding.name
        self._encoding = encoding
        self._segment_chars = segment_chars

    def count_text(self, text: str) -> int:
        encode = self._encoding.encode_ordinary
        if len(text) <= self._segment_chars:
            return len(encode(text))
        return sum(len(encode(segment)) for segment in segments(text, self._segment_chars))


def counter_for(model: str, choice: str) -> TextCounter:
    """The counter for a task on ``model`` under the TOKEN_COUNTER setting ``choice``.

    "auto" picks the model's encoding, "o200k_base" / "cl100k_base" name one, "heuristic" is
    :class:`HeuristicCounter`. An encoding that cannot be built offline falls back to the
    heuristic.
    """
    if choice == "heuristic":
        return HeuristicCounter()
    if choice == "auto":
        choice = encoding_for_model(model)
    elif choice not in ENCODING_NAMES:
        raise ValueError(f"unknown token counter {choice!r}")
    encoding = _encoding_or_none(choice)
    return HeuristicCounter() if encoding is None else TiktokenCounter(encoding)


@functools.cache
def _encoding_or_none(name: str) -> tiktoken.Encoding | None:
    # Cached, failures included: the warning is logged once and a broken file is not re-read.
    try:
        return load_encoding(name)
    except EncodingUnavailable as exc:
        log.warning("exact token counts unavailable, estimating instead: %s", exc)
        return None
