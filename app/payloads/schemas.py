"""Documented shapes of the streamed answers."""

from typing import Any, Literal

from pydantic import BaseModel, Field

PayloadFormat = Literal["openai"]


class ContextEntry(BaseModel):
    index: int
    tokens: int
    message: dict[str, Any]


class ContextView(BaseModel):
    uuid: str
    tokens: int = Field(description="Tokens of the payload /request would serve now.")
    budget: int = Field(description="allowed = window * (1 - buffer) - reserved output")
    threshold: int = Field(description="At or above this many tokens, compaction is due.")
    window: int
    reserved_output: int
    tools_tokens: int
    token_counter: str
    next_action: Literal["none", "condense", "over_budget"]
    next_step: dict[str, Any] = Field(
        description="A dry run of the next compaction: action (none|condense|truncate|elide), "
        "the positions it would hide, how many messages and tokens, and why a condense is skipped."
    )
    message_count: int
    last_seq: int
    messages: list[ContextEntry]
