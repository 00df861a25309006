"""Any OpenAI-compatible chat server: POST {base_url}/v1/chat/completions.

OpenAI, vLLM, LM Studio, llama.cpp server, Ollama's /v1 all speak it. The answer's text is
``choices[0].message.content`` (a string, or a list of text parts on some servers). The output
limit goes as ``max_completion_tokens`` to api.openai.com (its newer models refuse
``max_tokens``) and as ``max_tokens`` elsewhere (what compatible servers understand).
"""

from typing import Any

import httpx

from app.formats.parts import content_text
from app.llm.http import HTTPBackend

__all__ = ["OpenAIBackend"]


class OpenAIBackend(HTTPBackend):
    kind = "openai"
    path = "/v1/chat/completions"
    default_base_url = "https://api.openai.com"

    def headers(self) -> dict[str, str]:
        key = self.config.api_key
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}

    def body(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        is_openai = httpx.URL(self.url).host == "api.openai.com"
        limit = "max_completion_tokens" if is_openai else "max_tokens"
        return {"model": self.model, "messages": messages, limit: max_tokens, "stream": False}

    def text(self, data: Any) -> str:
        message = data["choices"][0]["message"]
        content = message.get("content")
        if content is None and message.get("refusal"):
            raise ValueError("the model refused")
        return content_text(content, strict=True)
