"""Message bodies: the OpenAI chat message shape (the service's own), plus ``tool_name`` on a
tool result (the field the original design's clients send); and the Anthropic and Ollama
message shapes a client may post instead (``?input=``), which app/messages/native.py converts.

Unknown extra fields are accepted and kept in ``messages.jsonl`` (but for the names the service
reserves for its own records: app/context/records.py), payloads carry only what the provider's
schema allows.
"""

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Tag,
    model_validator,
)

from app.formats.parts import image_media_type

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


def _article(role: str) -> str:
    return f"an {role}" if role == "assistant" else f"a {role}"


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
        if role == "tool" and self.tool_call_id is None and self.tool_name is None:
            # By name alone (as Ollama's clients send results), it answers the oldest open call
            # of that name.
            raise ValueError("a tool message needs tool_call_id (or tool_name)")
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
                    raise ValueError(f"{_article(role)} message cannot carry {part.type} parts")
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


# -- Anthropic's message shape (``?input=anthropic``) ------------------------------------------


class AnthropicTextBlock(BaseModel):
    model_config = _Strict
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = Field(None, description="Accepted, not kept.")
    citations: list[Any] | None = Field(None, description="Accepted, not kept.")


class AnthropicBase64Source(BaseModel):
    model_config = _Strict
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str = Field(min_length=1)


class AnthropicURLSource(BaseModel):
    model_config = _Strict
    type: Literal["url"]
    url: str = Field(pattern=r"^https?://")


class AnthropicImageBlock(BaseModel):
    model_config = _Strict
    type: Literal["image"]
    source: Annotated[AnthropicBase64Source | AnthropicURLSource, Field(discriminator="type")]
    cache_control: dict[str, Any] | None = Field(None, description="Accepted, not kept.")


class AnthropicToolUseBlock(BaseModel):
    model_config = _Strict
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=255)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = Field(None, description="Accepted, not kept.")


AnthropicResultPart = Annotated[
    AnthropicTextBlock | AnthropicImageBlock, Field(discriminator="type")
]


def _text_or_blocks(value: Any) -> str | None:
    if isinstance(value, str):
        return "text"
    return "blocks" if isinstance(value, list) else None


# A string or a list of blocks: errors go under ``blocks`` (pydantic would report each branch
# of a plain union, the string's first).
_TEXT_OR_BLOCKS = Discriminator(
    _text_or_blocks,
    custom_error_type="content_type",
    custom_error_message="must be a string or a list of content blocks",
)

AnthropicResultContent = Annotated[
    Annotated[str, Tag("text")] | Annotated[list[AnthropicResultPart], Tag("blocks")],
    _TEXT_OR_BLOCKS,
]


class AnthropicToolResultBlock(BaseModel):
    model_config = _Strict
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=255)
    content: AnthropicResultContent | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = Field(None, description="Accepted, not kept.")


AnthropicBlock = Annotated[
    AnthropicTextBlock | AnthropicImageBlock | AnthropicToolUseBlock | AnthropicToolResultBlock,
    Field(discriminator="type"),
]
AnthropicContent = Annotated[
    Annotated[str, Tag("text")] | Annotated[list[AnthropicBlock], Tag("blocks")],
    _TEXT_OR_BLOCKS,
]

# Which blocks each role may carry (Anthropic's rules).
_BLOCKS_BY_ROLE: dict[str, set[str]] = {
    "user": {"text", "image", "tool_result"},
    "assistant": {"text", "tool_use"},
}


class AnthropicMessage(BaseModel):
    """One message of Anthropic's Messages API (a response object posted whole is one too)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Reading a.py first."},
                        {
                            "type": "tool_use",
                            "id": "toolu_01A",
                            "name": "read_file",
                            "input": {"path": "a.py"},
                        },
                    ],
                    "usage": {"input_tokens": 1200, "output_tokens": 40},
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "def main()"}
                    ],
                },
            ]
        },
    )

    role: Literal["user", "assistant"]
    content: AnthropicContent
    type: Literal["message"] | None = Field(None, description="As on a response object; not kept.")
    usage: Usage | None = Field(None, description="Reported by the LLM: counts as an LLM call.")

    @model_validator(mode="after")
    def _check_role_rules(self) -> "AnthropicMessage":
        if self.role != "assistant" and self.usage is not None:
            raise ValueError("only assistant messages carry usage")
        if isinstance(self.content, list):
            if not self.content:
                raise ValueError("content blocks must not be empty")
            allowed = _BLOCKS_BY_ROLE[self.role]
            for block in self.content:
                if block.type not in allowed:
                    raise ValueError(
                        f"{_article(self.role)} message cannot carry {block.type} blocks"
                    )
        return self


class AnthropicBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[AnthropicMessage] = Field(min_length=1)


# -- Ollama's chat message shape (``?input=ollama``) -------------------------------------------

_Count = Annotated[int, Field(strict=True, ge=0)]


def _known_image(data: str) -> str:
    if image_media_type(data) is None:
        raise ValueError("not a base64 PNG, JPEG, GIF or WebP image")
    return data


class OllamaFunction(BaseModel):
    model_config = _Strict
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = Field(None, description="As Ollama streams it; not kept.")


class OllamaToolCall(BaseModel):
    model_config = _Strict
    id: str | None = Field(None, min_length=1, max_length=255)
    type: Literal["function"] | None = None
    function: OllamaFunction


class OllamaMessage(BaseModel):
    """One message of Ollama's ``/api/chat``."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "read_file", "arguments": {"path": "a.py"}}}
                    ],
                    "prompt_eval_count": 1200,
                    "eval_count": 40,
                },
                {"role": "tool", "tool_name": "read_file", "content": "def main(): ..."},
            ]
        },
    )

    role: Role
    content: str | None = None
    images: list[Annotated[str, AfterValidator(_known_image)]] | None = Field(
        None, description="Base64 PNG, JPEG, GIF or WebP images, on a user message."
    )
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = Field(None, min_length=1, max_length=255)
    tool_call_id: str | None = Field(None, min_length=1, max_length=255)
    prompt_eval_count: _Count | None = Field(None, description="The response's prompt tokens.")
    eval_count: _Count | None = Field(None, description="The response's output tokens.")
    usage: Usage | None = None

    @model_validator(mode="after")
    def _check_role_rules(self) -> "OllamaMessage":
        role = self.role
        counted = self.prompt_eval_count is not None or self.eval_count is not None
        if role != "assistant" and (self.tool_calls is not None or self.usage or counted):
            raise ValueError("only assistant messages carry tool_calls or token counts")
        if role != "tool" and (self.tool_call_id is not None or self.tool_name is not None):
            raise ValueError("only tool messages carry tool_name or tool_call_id")
        if role == "tool" and self.tool_call_id is None and self.tool_name is None:
            raise ValueError("a tool message needs tool_name (or tool_call_id)")
        if role != "user" and self.images is not None:
            raise ValueError("only user messages carry images")
        if self.images is not None and not self.images:
            raise ValueError("images, when present, must not be empty")
        if self.tool_calls is not None and not self.tool_calls:
            raise ValueError("tool_calls, when present, must not be empty")
        if role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        if role in ("system", "tool") and self.content is None:
            raise ValueError(f"a {role} message needs content")
        if role == "user" and self.content is None and not self.images:
            raise ValueError("a user message needs content or images")
        return self


class OllamaBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[OllamaMessage] = Field(min_length=1)


def _unparsed(value: Any) -> Any:
    return value


# The body of POST /messages as documented: a message or a batch in any of the input formats.
# It is validated against the one ``?input=`` names (or detection finds) by
# app/messages/native.py, so that each error names the format it was read as.
AppendBody = Annotated[
    Any,
    PlainValidator(
        _unparsed,
        json_schema_input_type=MessageIn
        | MessageBatch
        | AnthropicMessage
        | AnthropicBatch
        | OllamaMessage
        | OllamaBatch,
    ),
]


class AppendResult(BaseModel):
    seqs: list[int] = Field(description="The seqs the posted messages got, in order.")
    tokens: list[int] = Field(description="Each message's tokens, as posted.")
    context_tokens: int = Field(
        description="The context's messages' tokens once the append committed, as OpenAI's "
        "format renders them, after the cut of a message over the message cap if one was cut "
        "(a replay repeats the first answer)."
    )
    compaction_scheduled: bool = Field(
        False,
        description="Whether a background condense of the context is queued after this append "
        "(false in a replay).",
    )


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


class MessageText(BaseModel):
    """A range of one message's text, as posted: what an elision's or a mask's handle points at."""

    seq: int
    role: str | None = Field(description="Null for a rewind marker.")
    tool_call_id: str | None = Field(None, description="On a tool result: the call it answers.")
    tool_name: str | None = Field(None, description="On a tool result, when the agent sent it.")
    marker: str | None = Field(
        None, description="On a compaction's record (summary, truncation, ...): its kind."
    )
    tool_calls: list[ToolCall] | None = Field(
        None, description="On an assistant message that calls tools: its calls, whole."
    )
    text: str = Field(
        description="Characters [start, end) of the message's text: its content as one string "
        "(the texts of its parts joined by newlines, a stand-in for an image)."
    )
    total_chars: int = Field(description="The length of the whole text, in characters.")
    start: int = Field(description="The first character returned.")
    end: int = Field(description="One past the last character returned.")
    cut: bool = Field(
        description="Whether max_bytes stopped the text before the end asked for (or the end of "
        "the text)."
    )
    next_start: int | None = Field(
        description="Pass as start for the rest of the range; null when nothing of it is left."
    )


class HistoryHit(BaseModel):
    seq: int
    role: str | None
    timestamp: str
    snippet: str = Field(description="The text around the first match, on one line.")


class HistorySearch(BaseModel):
    query: str
    hits: list[HistoryHit]
    next_after_seq: int | None = Field(
        description="The limit was reached: pass as after_seq to search on; null when the "
        "history was searched to its end."
    )
