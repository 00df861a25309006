"""What the three example agents share: their command line, their two tools (read a file, list
a directory, both confined to a sandbox directory), and the task's life around the loop."""

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from context_client import ContextClient
from context_client.types import TaskKey, ToolCall, ToolDefinition

MAX_READ_CHARS = 20_000  # of a file, given to the model
SYSTEM_PROMPT = (
    "You are a careful assistant working in a sandbox directory. Use the tools to look at the "
    "files before you answer; answer briefly once you know."
)


def _path_tool(name: str, description: str) -> ToolDefinition:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "relative path"}},
                "required": ["path"],
            },
        },
    }


TOOLS = [
    _path_tool("read_file", "Read a text file of the sandbox."),
    _path_tool("list_dir", "List a directory of the sandbox ('.' for its root)."),
]


@dataclass(frozen=True)
class Options:
    prompt: str
    sandbox: Path
    model: str
    llm_url: str | None
    task_key: TaskKey
    temperature: float
    max_turns: int


def parse_options(description: str, model: str, llm_url_variable: str) -> Options:
    """The command line, with defaults from the environment (``--help`` lists them)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("prompt", help="what to ask the model about the sandbox's files")
    parser.add_argument(
        "--sandbox", type=Path, default=Path.cwd(), help="the directory the tools may read"
    )
    parser.add_argument(
        "--model",
        default=os.environ.get("AGENT_MODEL", model),
        help=f"the model ($AGENT_MODEL, default {model})",
    )
    parser.add_argument(
        "--llm-url",
        default=os.environ.get(llm_url_variable),
        help=f"the LLM's base URL (${llm_url_variable}, default: the provider's)",
    )
    parser.add_argument(
        "--task-key",
        default="local/examples/sandbox/task/1",
        help="source/owner/repo/type/id of the task: a later run of the same key inherits "
        "what this one left (default %(default)s)",
    )
    parser.add_argument(
        "--temperature", type=float, default=0.2, help="request default (%(default)s)"
    )
    parser.add_argument("--max-turns", type=int, default=10, help="LLM calls at most")
    parser.epilog = (
        "The context service is $CONTEXT_SERVICE_URL (default http://127.0.0.1:8080), with "
        "$CONTEXT_SERVICE_API_KEY when it needs a key."
    )
    args = parser.parse_args()
    parts = args.task_key.split("/")
    if len(parts) != 5 or not all(parts):
        parser.error("--task-key needs five parts: source/owner/repo/type/id")
    return Options(
        prompt=args.prompt,
        sandbox=args.sandbox.resolve(),
        model=args.model,
        llm_url=args.llm_url,
        task_key={
            "task_source": parts[0],
            "owner": parts[1],
            "repo": parts[2],
            "task_type": parts[3],
            "task_id": parts[4],
        },
        temperature=args.temperature,
        max_turns=args.max_turns,
    )


@contextlib.contextmanager
def running_task(service: ContextClient, options: Options, provider: str) -> Iterator[str]:
    """A new task holding the prompt; completed when the block ends, failed (with the error)
    when it raises."""
    task = service.create_task(
        options.task_key,
        options.model,
        llm_provider=provider,
        system_prompt=SYSTEM_PROMPT,
        tools=TOOLS,
        request_defaults={"temperature": options.temperature},
    )
    uuid = task["uuid"]
    print(f"task {uuid}", flush=True)
    service.append(uuid, {"role": "user", "content": options.prompt})
    try:
        yield uuid
    except BaseException as exc:
        service.fail_task(uuid, f"{type(exc).__name__}: {exc}")
        raise
    service.complete_task(uuid)


def answer_tool_calls(
    service: ContextClient, uuid: str, calls: list[ToolCall], sandbox: Path
) -> None:
    """Run each call and append its result, paired with the call by its id."""
    for call in calls:
        output = run_tool(sandbox, call["function"]["name"], call["function"]["arguments"])
        print(f"  {call['function']['name']}({call['function']['arguments']})", flush=True)
        service.append(uuid, {"role": "tool", "tool_call_id": call["id"], "content": output})


def run_tool(sandbox: Path, name: str, arguments: str) -> str:
    """The tool's output, or the error the model should see."""
    try:
        target = _inside(sandbox, str(json.loads(arguments or "{}").get("path", ".")))
        if name == "read_file":
            return target.read_text(errors="replace")[:MAX_READ_CHARS]
        if name == "list_dir":
            entries = sorted(target.iterdir())
            return "\n".join(p.name + ("/" if p.is_dir() else "") for p in entries) or "(empty)"
        return f"error: there is no tool {name!r}"
    except (OSError, ValueError, AttributeError) as exc:
        return f"error: {exc}"


def _inside(sandbox: Path, relative: str) -> Path:
    target = (sandbox / relative).resolve()
    if not target.is_relative_to(sandbox):
        raise ValueError(f"{relative} is outside the sandbox")
    return target
