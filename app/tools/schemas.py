"""Tool execution records, with the field names of the original design's tools.jsonl."""

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class ToolRecordIn(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "tool": "read_file",
                    "args": {"path": "a.py"},
                    "result": "def main(): ...",
                    "status": "success",
                    "duration_ms": 234,
                    "tool_call_id": "call_1",
                }
            ]
        },
    )
    tool: str = Field(
        min_length=1, max_length=255, validation_alias=AliasChoices("tool", "tool_name")
    )
    args: dict[str, Any] = Field(
        default_factory=dict, validation_alias=AliasChoices("args", "arguments")
    )
    result: Any = None
    status: Literal["success", "error"] = "success"
    error: str | None = None
    duration_ms: int | None = Field(None, strict=True, ge=0)
    tool_call_id: str | None = Field(None, max_length=255)


class ToolRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    seq: int
    tool: str
    args: dict[str, Any]
    status: str
    timestamp: str


class ToolRecordPage(BaseModel):
    tools: list[ToolRecord]
    next_after_seq: int | None
