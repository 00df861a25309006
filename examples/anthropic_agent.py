"""An agent loop on the Anthropic SDK, its context kept by the context service.

Each turn asks the service for the next request in Anthropic's format (never over the model's
window), sends it with the SDK, records the answer (with its usage) and runs the tools it calls,
until the model answers without calling any. The request's keys the SDK's create() does not take
as arguments (temperature, in anthropic 2.14) travel in extra_body: the request sent is the
service's payload as it is.

    ANTHROPIC_API_KEY=... python examples/anthropic_agent.py "What is in README.md?" --sandbox .
"""

from anthropic import Anthropic

from agent_support import answer_tool_calls, parse_options, running_task
from context_client import ContextClient


def main() -> None:
    options = parse_options(
        __doc__ or "", model="claude-sonnet-4-5", llm_url_variable="ANTHROPIC_BASE_URL"
    )
    with (
        Anthropic(base_url=options.llm_url) as llm,
        ContextClient() as service,
        running_task(service, options, "anthropic") as uuid,
    ):
        for _ in range(options.max_turns):
            request = service.request_kwargs(uuid, sdk="anthropic")
            reply = service.record_anthropic(uuid, llm.messages.create(**request))
            if not reply.tool_calls:
                print(reply.text)
                return
            answer_tool_calls(service, uuid, reply.tool_calls, options.sandbox)
        raise RuntimeError(f"no final answer after {options.max_turns} turns")


if __name__ == "__main__":
    main()
