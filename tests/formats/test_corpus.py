"""Every corpus trajectory in every format: chunking-independent, valid, and counted as stored.

Each file is fed to a fresh renderer one line per chunk and as one chunk (the bytes must be the
same), validated for its provider (schema, SDK types, pairing in the provider's terms), and its
``payload_tokens`` compared with what the service stores: ``PER_PAYLOAD`` + tools + the sum of
``message_tokens``. The two differ by exactly the adjustments each format documents.
"""

from functools import cache

import orjson
import pytest

from app.formats import FORMATS
from app.formats.anthropic import STANDALONE_ID, TOOL_ID
from app.tokens.accounting import PER_PAYLOAD
from app.tokens.counters import HeuristicCounter, counter_for
from tests.support.corpus import CORPUS_FILES, corpus_messages
from tests.support.formats import (
    KEEPING_IDS,
    METADATA,
    adjustment,
    render,
    unanswered_calls,
    validate_payload,
)

pytestmark = pytest.mark.database_agnostic

COUNTER = HeuristicCounter()
load = cache(corpus_messages)  # each file is read by several tests


def test_corpus_has_the_shapes_the_formats_must_handle() -> None:
    """The cases below are really exercised: trailing unanswered calls, reused ids, two
    leading system messages, blank texts."""
    assert len(CORPUS_FILES) == 37
    trailing = [name for name in CORPUS_FILES if unanswered_calls(load(name))]
    assert len(trailing) == 11
    reused = [
        name
        for name in CORPUS_FILES
        if len(ids := [c["id"] for m in load(name) for c in m.get("tool_calls") or ()])
        > len(set(ids))
    ]
    assert reused == ["swe-agent__marshmallow-1867_function_calling_replace.jsonl"]
    leading_pairs = [n for n in CORPUS_FILES if [m["role"] for m in load(n)[:2]] == ["system"] * 2]
    assert leading_pairs == ["codex__codemie_rollout_019e1625.jsonl"]


@pytest.mark.parametrize("keep_ids", [False, True], ids=["ids_renumbered", "ids_kept"])
@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("corpus_file", CORPUS_FILES)
def test_corpus_file_renders_valid_and_counted(corpus_file: str, name: str, keep_ids: bool) -> None:
    messages = load(corpus_file)
    metadata = KEEPING_IDS if keep_ids else METADATA
    whole = render(name, messages, metadata)
    assert render(name, messages, metadata, lines_per_chunk=1) == whole
    payload = orjson.loads(whole)
    validate_payload(name, payload)

    payload_format = FORMATS[name]
    stored = (
        PER_PAYLOAD
        + payload_format.tools_tokens(COUNTER, METADATA["tools"])
        + sum(payload_format.message_tokens(COUNTER, m) for m in messages)
    )
    served = payload_format.payload_tokens(COUNTER, payload)
    expected = adjustment(name, COUNTER, messages, keep_ids=keep_ids)
    assert expected >= 0
    assert stored - served == expected


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_canonical_tool_ids_cost_the_same_in_exact_encodings(encoding: str) -> None:
    """What keeps Anthropic's per-message counts exact: every id costs what the standalone
    one does (eight digits always split into the same number of BPE pieces)."""
    counter = counter_for("", encoding)
    assert counter.name == encoding
    numbers = [*range(1, 1200), *range(0, 10**8, 999_983), 10**8 - 1]
    assert {counter.count_text(TOOL_ID.format(n)) for n in numbers} == {
        counter.count_text(STANDALONE_ID)
    }


@pytest.mark.parametrize("name", ["anthropic", "ollama"])
@pytest.mark.parametrize(
    "corpus_file",
    [
        "codex__codemie_rollout_019e1625.jsonl",  # two leading system messages, many calls
        "swe-agent__marshmallow-1867_function_calling_replace.jsonl",  # reused ids
        "openhands__multiswe_ponyc-4593.jsonl",  # a trailing unanswered call
        "claude-agent-sdk__ja_issue-453_evaluation.jsonl",  # Japanese
    ],
)
@pytest.mark.parametrize("keep_ids", [False, True], ids=["ids_renumbered", "ids_kept"])
def test_sums_hold_with_an_exact_counter(corpus_file: str, name: str, keep_ids: bool) -> None:
    counter = counter_for("gpt-4o", "o200k_base")
    messages = load(corpus_file)
    payload_format = FORMATS[name]
    payload = orjson.loads(render(name, messages, KEEPING_IDS if keep_ids else METADATA))
    stored = (
        PER_PAYLOAD
        + payload_format.tools_tokens(counter, METADATA["tools"])
        + sum(payload_format.message_tokens(counter, m) for m in messages)
    )
    served = payload_format.payload_tokens(counter, payload)
    assert stored - served == adjustment(name, counter, messages, keep_ids=keep_ids)
