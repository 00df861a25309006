"""Anthropic's Messages API: POST {base_url}/v1/messages.

Headers ``x-api-key`` and ``anthropic-version: 2023-06-01``. System messages are not chat turns
there: they are lifted into the top-level ``"system"`` (joined by blank lines), and consecutive
turns of the same role are merged (as the API would do). ``max_tokens`` is required. The answer's
text is the concatenation of the ``content`` blocks of type ``text``.
"""

from typing import Any

from app.llm.http import HTTPBackend

__all__ = ["ANTHROPIC_VERSION", "AnthropicBackend"]

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicBackend(HTTPBackend):
    kind = "anthropic"
    path = "/v1/messages"
    default_base_url = "https://api.anthropic.com"

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if self.config.api_key:
            headers["x-api-key"] = self.config.api_key.get_secret_value()
        return headers

    def body(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        system = [m["content"] for m in messages if m["role"] == "system" and m["content"]]
        turns: list[dict[str, str]] = []
        for message in messages:
            if message["role"] == "system":
                continue
            if turns and turns[-1]["role"] == message["role"]:
                turns[-1]["content"] += "\n\n" + message["content"]
            else:
                turns.append({"role": message["role"], "content": message["content"]})
        if not turns:
            raise ValueError("anthropic needs at least one user or assistant message")
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": turns}
        if system:
            body["system"] = "\n\n".join(system)
        return body

    def text(self, data: Any) -> str:
        blocks = data["content"]
        if not isinstance(blocks, list):
            raise TypeError("content is not a list of blocks")
        return "".join(
            block["text"]
            for block in blocks
            if isinstance(block, dict) and block.get("type") == "text"
        )
