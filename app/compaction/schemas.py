"""Compaction and rewind bodies and answers."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CompressBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: Literal["auto", "mask", "condense", "truncate"] = Field(
        "auto", description="auto: condense. mask: hide older tool results behind placeholders."
    )
    backend: str | None = Field(
        None, description="A configured LLM backend by name (or 'extractive'); never a URL."
    )


class CompactionResult(BaseModel):
    kind: Literal["mask", "condense", "truncation", "elision", "skipped"]
    reason: str | None = Field(description="Why nothing was done, when skipped.")
    summary_id: int | None
    hidden_messages: int
    tokens_before: int
    tokens_after: int


class RewindBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to_seq: int = Field(strict=True, ge=1, description="The message to rewind to.")
    include_target: bool = Field(
        False,
        strict=True,
        description="Keep the target message itself (Roo Code's includeTargetMessage).",
    )


class RewindResult(BaseModel):
    last_seq: int
    messages: int = Field(description="Messages in the effective context now.")
    context_tokens: int


class SummaryRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    kind: str
    start_seq: int
    end_seq: int
    summary: str
    original_tokens: int
    summary_tokens: int
    created_at: str


class SummaryPage(BaseModel):
    summaries: list[SummaryRecord]
    next_after_id: int | None
