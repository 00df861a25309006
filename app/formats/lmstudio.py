"""LM Studio's OpenAI-compatible ``POST /v1/chat/completions``. Pure.

The same request as :mod:`app.formats.openai` (messages verbatim, OpenAI function tools, the
task's request defaults), counted the same way, with one difference:

- the output limit is ``max_tokens``. LM Studio honours ``max_tokens``; ``max_completion_tokens``
  is the newer OpenAI name, which OpenAI-compatible local servers may ignore, leaving the answer
  unbounded and the budget's reserved output meaningless. A ``max_completion_tokens`` given in
  the request defaults is renamed; ``max_tokens`` given there wins over both.

The body stays valid against the OpenAI request schema, where ``max_tokens`` is still defined.
"""

from typing import Any

from app.formats.openai import OpenAIFormat


class LMStudioFormat(OpenAIFormat):
    name = "lmstudio"
    counted_as = "openai"

    def defaults(self, metadata: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
        defaults: dict[str, Any] = dict(metadata.get("request_defaults") or {})
        newer = defaults.pop("max_completion_tokens", None)
        defaults.setdefault("max_tokens", max_output_tokens if newer is None else newer)
        return defaults
