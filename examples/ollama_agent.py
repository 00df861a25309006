"""An agent loop on Ollama's HTTP API (/api/chat, with httpx), its context kept by the
context service.

Each turn asks the service for the next request in Ollama's format (the window in
options.num_ctx, never overflowed), posts it, records the answer (with its token counts) and
runs the tools it calls, until the model answers without calling any.

    python examples/ollama_agent.py "What is in README.md?" --sandbox . --model qwen3
"""

import httpx

from agent_support import answer_tool_calls, parse_options, running_task
from context_client import ContextClient

OLLAMA_URL = "http://127.0.0.1:11434"


def main() -> None:
    options = parse_options(__doc__ or "", model="qwen3", llm_url_variable="OLLAMA_HOST")
    with (
        httpx.Client(base_url=options.llm_url or OLLAMA_URL, timeout=600) as llm,
        ContextClient() as service,
        running_task(service, options, "ollama") as uuid,
    ):
        for _ in range(options.max_turns):
            request = service.request_payload(uuid, format="ollama")
            answer = llm.post("/api/chat", json=request).raise_for_status().json()
            reply = service.record_ollama(uuid, answer)
            if not reply.tool_calls:
                print(reply.text)
                return
            answer_tool_calls(service, uuid, reply.tool_calls, options.sandbox)
        raise RuntimeError(f"no final answer after {options.max_turns} turns")


if __name__ == "__main__":
    main()
