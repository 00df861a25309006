"""Agents on the official SDKs that talk to the service's proxy endpoints, and the checks the
proxy tests share: a service configured to forward to the fake LLM, a tool-using agent loop on
each SDK (streaming or not), and the task's stored conversation read back from its files."""

import json
from pathlib import Path
from typing import Any

import anthropic
import openai

from app.context.effective import is_marker, plan
from app.proxy.matching import message_hash
from tests.fakes.llm_server import FakeLLM, ToolUse
from tests.support.server import jsonl_records, task_dirs

OPENAI_MODEL = "gpt-4o"
ANTHROPIC_MODEL = "claude-sonnet-5-5"
SYSTEM = "You are a coding agent. Read the files you need, then answer."
# Long enough that a dozen of them overflow a 4000-token window.
FILE_TEXT = "def total(items):\n    return sum(item.price for item in items)  # no discount\n" * 16

OPENAI_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
ANTHROPIC_TOOL: dict[str, Any] = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": OPENAI_TOOL["function"]["parameters"],
}


def proxy_env(fake: FakeLLM, **extra: str) -> dict[str, str]:
    """A service forwarding OpenAI's wire to the fake as backend "gpt" and Anthropic's as
    "claude", counting tokens with the heuristic (what the tests count with too)."""
    backends = {
        "gpt": {"kind": "openai", "base_url": fake.base_url, "model": OPENAI_MODEL},
        "claude": {"kind": "anthropic", "base_url": fake.base_url, "model": ANTHROPIC_MODEL},
    }
    return {
        "LLM_BACKENDS": json.dumps(backends),
        "PROXY__OPENAI_BACKEND": "gpt",
        "PROXY__ANTHROPIC_BACKEND": "claude",
        "TOKEN_COUNTER": "heuristic",
        "LLM_MAX_RETRIES": "0",
    } | extra


def script(fake: FakeLLM, reads: int) -> None:
    """The model reads ``reads`` files, one call a turn, then answers."""
    fake.set("ok", script=[ToolUse("read_file", {"path": f"src/f{i}.py"}) for i in range(reads)])
    fake.script.append("The total ignores discounts.")


# -- an OpenAI agent ------------------------------------------------------------------------


def openai_turn(
    llm: openai.OpenAI, messages: list[dict[str, Any]], *, stream: bool, headers: dict[str, str]
) -> dict[str, Any]:
    """One call; the assistant message as the agent keeps it in its history."""
    kwargs: dict[str, Any] = {
        "model": OPENAI_MODEL,
        "messages": messages,
        "tools": [OPENAI_TOOL],
        "max_tokens": 256,
        "temperature": 0.1,
        "extra_headers": headers,
    }
    if stream:
        with llm.chat.completions.stream(**kwargs) as events:
            message = events.get_final_completion().choices[0].message
    else:
        message = llm.chat.completions.create(**kwargs).choices[0].message
    kept: dict[str, Any] = message.to_dict()
    return kept


def openai_results(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": call["id"], "content": f"# {i}\n{FILE_TEXT}"}
        for i, call in enumerate(reply.get("tool_calls") or ())
    ]


# -- an Anthropic agent -----------------------------------------------------------------------


def anthropic_turn(
    llm: anthropic.Anthropic,
    messages: list[dict[str, Any]],
    *,
    stream: bool,
    headers: dict[str, str],
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": ANTHROPIC_MODEL,
        "system": SYSTEM,
        "messages": messages,
        "tools": [ANTHROPIC_TOOL],
        "max_tokens": 256,
        "extra_headers": headers,
    }
    if stream:
        with llm.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = llm.messages.create(**kwargs)
    return {"role": "assistant", "content": [block.to_dict() for block in message.content]}


def anthropic_results(reply: dict[str, Any]) -> list[dict[str, Any]]:
    results = [
        {"type": "tool_result", "tool_use_id": block["id"], "content": f"# {i}\n{FILE_TEXT}"}
        for i, block in enumerate(reply["content"])
        if block["type"] == "tool_use"
    ]
    return [{"role": "user", "content": results}] if results else []


# -- what the service holds -------------------------------------------------------------------


def stored_conversation(context_dir: Path, task_uuid: str) -> list[dict[str, Any]]:
    """The task's history as a rewind leaves it: its messages, markers and rewound ones out."""
    (status,) = task_dirs(context_dir, task_uuid)
    records = jsonl_records(context_dir / status / task_uuid / "messages.jsonl")
    active = plan(records)
    return [r for r in records if not is_marker(r) and not active.is_removed(r["seq"])]


def hashes(messages: list[dict[str, Any]]) -> list[str]:
    return [message_hash(message) for message in messages]
