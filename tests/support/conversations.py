"""Messages as an agent posts them, built by hand."""

from typing import Any

READ_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def user(content: Any = "Fix the bug in a.py") -> dict[str, Any]:
    return {"role": "user", "content": content}


def function_call(call_id: str, name: str = "read_file", path: str = "a.py") -> dict[str, Any]:
    """One OpenAI tool call (an item of an assistant's ``tool_calls``) with a path argument."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": f'{{"path": "{path}"}}'},
    }


def tool_call(call_id: str = "call_1", arguments: Any = '{"path": "a.py"}') -> dict[str, Any]:
    """An assistant message calling read_file."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "read_file", "arguments": arguments},
            }
        ],
    }


def tool_result(call_id: str = "call_1", text: str = "def main(): ...") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def turns(count: int, words: int = 400, prefix: str = "turn") -> list[dict[str, Any]]:
    """Alternating user and assistant messages, "<prefix> <i>: x x x ..." (``words`` x's)."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{prefix} {i}: " + "x " * words}
        for i in range(count)
    ]


def file_turns(count: int, size: int = 200) -> list[dict[str, str]]:
    """Alternating user/assistant messages, each about a file: "turn <n> about src/mod_<n>.py
    www..." (``size`` w's)."""
    return [
        {
            "role": "user" if n % 2 == 0 else "assistant",
            "content": f"turn {n} about src/mod_{n}.py " + "w" * size,
        }
        for n in range(count)
    ]
