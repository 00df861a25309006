"""Message bodies: the OpenAI chat message shape, plus ``tool_name`` on a tool result (the
field the original design's clients send).

Unknown extra fields are accepted and kept in ``messages.jsonl`` (but for the names the service
reserves for its own records: app/context/records.py), payloads carry only what the provider's
schema allows.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

Role = Literal["system", "user", "assistant", "tool"]

_Strict = ConfigDict(extra="forbid")


class FunctionCall(BaseModel):
    model_config = _Strict
    name: str = Field(min_length=1)
    arguments: str


class ToolCall(BaseModel):
    model_config = _Strict
    id: str = Field(min_length=1, max_length=255)
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(BaseModel):
    model_config = _Strict
    type: Literal["text"]
    text: str


class RefusalPart(BaseModel):
    model_config = _Strict
    type: Literal["refusal"]
    refusal: str


class ImageURL(BaseModel):
    model_config = _Strict
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    model_config = _Strict
    type: Literal["image_url"]
    image_url: ImageURL


class InputAudio(BaseModel):
    model_config = _Strict
    data: str
    format: Literal["wav", "mp3"]


class AudioPart(BaseModel):
    model_config = _Strict
    type: Literal["input_audio"]
    input_audio: InputAudio


class FileData(BaseModel):
    model_config = _Strict
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(BaseModel):
    model_config = _Strict
    type: Literal["file"]
    file: FileData


ContentPart = Annotated[
    TextPart | RefusalPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")
]

# Which content part types each role may carry (OpenAI's request schema).
_PARTS_BY_ROLE: dict[str, set[str]] = {
    "system": {"text"},
    "tool": {"text"},
    "assistant": {"text", "refusal"},
    "user": {"text", "image_url", "input_audio", "file"},
}


class Usage(BaseModel):
    """The LLM call's usage, in OpenAI's names or Anthropic's or Ollama's."""

    model_config = ConfigDict(extra="allow")
    prompt_tokens: int | None = Field(None, strict=True, ge=0)
    completion_tokens: int | None = Field(None, strict=True, ge=0)
    input_tokens: int | None = Field(
        None, strict=True, ge=0, description="Anthropic's prompt_tokens"
    )
    cache_creation_input_tokens: int | None = Field(None, strict=True, ge=0)
    cache_read_input_tokens: int | None = Field(None, strict=True, ge=0)
    output_tokens: int | None = Field(None, strict=True, ge=0)
    prompt_eval_count: int | None = Field(
        None, strict=True, ge=0, description="Ollama's prompt_tokens"
    )
    eval_count: int | None = Field(None, strict=True, ge=0)


class MessageIn(BaseModel):
    """One chat message."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                    "usage": {"prompt_tokens": 1200, "completion_tokens": 40},
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "def main(): ..."},
            ]
        },
    )

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = Field(None, min_length=1, max_length=255)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(None, min_length=1, max_length=255)
    tool_name: str | None = Field(None, description="The tool's name, on a tool result.")
    usage: Usage | None = Field(None, description="Reported by the LLM: counts as an LLM call.")

    @model_validator(mode="after")
    def _check_role_rules(self) -> "MessageIn":
        role = self.role
        if role != "assistant" and (self.tool_calls is not None or self.usage is not None):
            raise ValueError("only assistant messages carry tool_calls or usage")
        if role != "tool" and (self.tool_call_id is not None or self.tool_name is not None):
            raise ValueError("only tool messages carry tool_call_id or tool_name")
        if role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id")
        if role == "assistant":
            if self.content is None and not self.tool_calls:
                raise ValueError("an assistant message needs content or tool_calls")
            if self.tool_calls is not None and not self.tool_calls:
                raise ValueError("tool_calls, when present, must not be empty")
        elif self.content is None:
            raise ValueError(f"a {role} message needs content")
        if isinstance(self.content, list):
            if not self.content:
                raise ValueError("content parts must not be empty")
            allowed = _PARTS_BY_ROLE[role]
            for part in self.content:
                if part.type not in allowed:
                    raise ValueError(f"a {role} message cannot carry {part.type} parts")
        return self

    def fields(self) -> dict[str, Any]:
        """The message as stored: set fields, and extras as posted (nulls too), JSON-ready."""
        nulls = {name: None for name, value in (self.model_extra or {}).items() if value is None}
        return (
            self.model_dump(mode="json", exclude_none=True)
            | nulls
            | {"content": self.content_json()}
        )

    def content_json(self) -> Any:
        if isinstance(self.content, list):
            return [part.model_dump(mode="json", exclude_none=True) for part in self.content]
        return self.content


class MessageBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[MessageIn] = Field(min_length=1)


def _body_kind(value: Any) -> str:
    return "batch" if isinstance(value, dict) and "messages" in value else "single"


AppendBody = Annotated[
    Annotated[MessageIn, Tag("single")] | Annotated[MessageBatch, Tag("batch")],
    Discriminator(_body_kind),
]


class AppendResult(BaseModel):
    seqs: list[int]
    tokens: list[int]
    context_tokens: int
    compaction_scheduled: bool = False


class MessageRecord(BaseModel):
    """A line of messages.jsonl: the message plus seq, timestamp and tokens.

    Marker records (compaction, rewind) are lines too; a rewind marker has no role.
    """

    model_config = ConfigDict(extra="allow")
    seq: int
    role: str | None = None
    content: Any = None
    timestamp: str
    tokens: int


class MessagePage(BaseModel):
    messages: list[MessageRecord]
    last_seq: int = Field(description="The newest seq of the task.")
    next_after_seq: int | None = Field(
        description="Pass as after_seq for the next page; null when this page is the last."
    )
