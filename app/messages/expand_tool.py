"""The ``context_expand`` tool a task may offer its model (``expand_tool: true``): its
definition, in OpenAI's tool shape (each payload format converts it like the agent's own tools).
Pure.

Its call is answered from GET /tasks/{uuid}/messages/{seq} (the client library's
``expand_result`` builds it), and the answer is an ordinary tool result.
"""

from typing import Any

EXPAND_TOOL_NAME = "context_expand"

EXPAND_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": EXPAND_TOOL_NAME,
        "description": (
            "Show again part of an earlier message that was hidden to save context. A hidden "
            "tool output reads '[output of NAME(...) hidden: 412 lines, 18.3 KB, seq 57]': call "
            "with seq=57. A message cut in the middle reads '[... 12,345 "
            "characters elided to fit the context window (seq 57, chars 2,000-14,345) ...]': "
            "call with seq=57, start=2000, end=14345. A long answer is cut at max_bytes and says "
            "where to continue. Ask only for what you need: the answer takes room in the context."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "seq": {"type": "integer", "minimum": 1, "description": "The message's seq."},
                "start": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The first character to show (default 0).",
                },
                "end": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "One past the last character to show (default: the end).",
                },
                "max_bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "At most this many bytes of text (default 16384).",
                },
            },
            "required": ["seq"],
        },
    },
}
