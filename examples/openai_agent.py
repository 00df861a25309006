"""An agent loop on the OpenAI SDK, its context kept by the context service.

Each turn asks the service for the next request (never over the model's window), sends it with
the SDK, records the answer (with its usage) and runs the tools it calls, until the model
answers without calling any.

    OPENAI_API_KEY=... python examples/openai_agent.py "What is in README.md?" --sandbox .

$OPENAI_BASE_URL (or --llm-url) points it at any OpenAI-compatible server."""

from openai import OpenAI

from agent_support import answer_tool_calls, parse_options, running_task
from context_client import ContextClient


def main() -> None:
    options = parse_options(__doc__ or "", model="gpt-4o-mini", llm_url_variable="OPENAI_BASE_URL")
    with (
        OpenAI(base_url=options.llm_url) as llm,
        ContextClient() as service,
        running_task(service, options, "openai") as uuid,
    ):
        for _ in range(options.max_turns):
            request = service.request_kwargs(uuid, sdk="openai")
            reply = service.record_openai(uuid, llm.chat.completions.create(**request))
            if not reply.tool_calls:
                print(reply.text)
                return
            answer_tool_calls(service, uuid, reply.tool_calls, options.sandbox)
        raise RuntimeError(f"no final answer after {options.max_turns} turns")


if __name__ == "__main__":
    main()
