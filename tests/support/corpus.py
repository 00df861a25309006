"""The corpus of real agent trajectories (../shared/corpus/trajectories): one JSONL file of
OpenAI-shaped messages each."""

import json
from typing import Any

from tests.support.paths import CORPUS

CORPUS_FILES = sorted(path.name for path in CORPUS.glob("*.jsonl"))


def corpus_messages(name: str) -> list[dict[str, Any]]:
    """The messages of one corpus file, as posted."""
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
