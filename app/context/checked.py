"""Which first bytes of each context's current.jsonl were found whole, by their hash.

A payload parses every line of current.jsonl before its first byte, so that it is never cut
short by a line that does not parse. Its bytes are most often the ones the last payload of the
context parsed, with a few lines appended since: their 64-bit XXH3 hash (~90 GB/s here; zlib's
CRC-32, used before, 5-7 GB/s and on the first byte's path) shows them unchanged for a fraction
of parsing them again (~0.4 GB/s), and only the lines after them are parsed. Bytes changed in
place, by a disk or a hand, change the hash and are parsed again; the hash is over the bytes,
not the file's size or time, which a change within one clock tick leaves as they were.
"""

import io
import threading
from dataclasses import dataclass

from xxhash import xxh3_64

from app.context.pending import ContextKey
from app.storage.file_work import NotQuick
from app.storage.jsonl import first_damaged_line

MAX_CONTEXTS = 4096  # contexts remembered per process; a context past it is parsed whole


@dataclass(frozen=True)
class _Parsed:
    length: int  # the first bytes that parsed, whole lines
    digest: int  # their XXH3 hash


class ParsedPrefixes:
    """Per process; called from worker threads and the event loop."""

    def __init__(self, max_contexts: int = MAX_CONTEXTS) -> None:
        self.max_contexts = max_contexts
        self._parsed: dict[ContextKey, _Parsed] = {}
        self._lock = threading.Lock()

    def unparsed_bytes(self, context: ContextKey, size: int) -> int:
        """How many of a context's first ``size`` bytes a check would parse (the rest it
        would only hash), if they are as they were."""
        known = self._parsed.get(context)
        return size if known is None or known.length > size else size - known.length

    def first_damaged_line(
        self, context: ContextKey, data: bytes, *, max_parse: int | None = None
    ) -> int | None:
        """:func:`first_damaged_line` of ``data``, a context's current.jsonl from its start
        to a line boundary, parsing only what follows the bytes last found whole.
        ``max_parse``: :class:`NotQuick` rather than parse more than that (bytes changed
        since, a file rewritten by a compaction or another process: parsed whole)."""
        known = self._parsed.get(context)
        start, digest = 0, xxh3_64()
        if known is not None and known.length <= len(data):
            digest.update(memoryview(data)[: known.length])
            if digest.intdigest() == known.digest:
                start = known.length
            else:
                digest.reset()
        if max_parse is not None and len(data) - start > max_parse:
            raise NotQuick(f"{len(data) - start} bytes to parse")
        damaged = first_damaged_line(io.BytesIO(data), len(data), start)
        if damaged is not None:
            with self._lock:
                self._parsed.pop(context, None)
            return damaged
        digest.update(memoryview(data)[start:])  # each byte hashed once
        parsed = _Parsed(len(data), digest.intdigest())
        with self._lock:
            if context not in self._parsed and len(self._parsed) >= self.max_contexts:
                del self._parsed[next(iter(self._parsed))]  # the oldest one
            self._parsed[context] = parsed
        return None
