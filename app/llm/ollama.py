"""Ollama's native chat API: POST {base_url}/api/chat with ``"stream": false``.

The answer's text is ``message.content``. The output limit goes as ``options.num_predict`` and the
configured window as ``options.num_ctx``: without it Ollama runs the model with its small default
context and silently drops the start of a long prompt.
"""

from typing import Any

from app.formats.parts import content_text
from app.llm.http import HTTPBackend

__all__ = ["OllamaBackend"]


class OllamaBackend(HTTPBackend):
    kind = "ollama"
    path = "/api/chat"
    default_base_url = "http://127.0.0.1:11434"

    def headers(self) -> dict[str, str]:
        key = self.config.api_key  # only for an Ollama behind an authenticating proxy
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}

    def body(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            "stream": False,
            "options": {"num_predict": max_tokens, "num_ctx": self.window},
        }

    def text(self, data: Any) -> str:
        if data.get("error"):
            raise ValueError("error in the answer")
        return content_text(data["message"]["content"], strict=True)
