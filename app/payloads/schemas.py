"""Documented shapes of the streamed answers."""

from typing import Any, Literal

from pydantic import BaseModel, Field

FormatName = Literal["openai", "lmstudio", "anthropic", "ollama"]


class Calibration(BaseModel):
    factor: float = Field(description="Real tokens per counted token, from reported usage.")
    samples: int = Field(description="Reports that went into the factor.")
    estimated_real_tokens: int = Field(description="tokens x factor")


class CompactionOptionsOut(BaseModel):
    tiers: list[str]
    keep_tool_results: int


class ContextEntry(BaseModel):
    index: int
    tokens: int
    message: dict[str, Any]


class ProtectedEntry(BaseModel):
    thread_id: int = Field(description="The context above this one it comes from (0: root).")
    tokens: int
    message: dict[str, Any]


class BudgetView(BaseModel):
    """A context's tokens against its budget, and what compaction would do next."""

    uuid: str
    thread_id: int = Field(description="0: the task's root context; else a thread.")
    format: FormatName = Field(description="The payload format the tokens are counted in.")
    tokens: int = Field(
        description="Counted tokens of the payload /request would serve now; for a thread, of "
        "its own context (X-Thread-Tokens): the protected regions add protected_tokens."
    )
    budget: int = Field(
        description="allowed = window * (1 - buffer) - reserved output, in counted tokens "
        "(divided by the calibration factor)"
    )
    threshold: int = Field(description="At or above this many tokens, compaction is due.")
    window: int
    reserved_output: int
    tools_tokens: int
    token_counter: str = Field(description="o200k_base, cl100k_base or heuristic")
    calibration: Calibration
    compaction: CompactionOptionsOut = Field(
        description="The tiers compaction tries, in order, and the tool results masking keeps."
    )
    next_action: Literal["none", "condense", "over_budget"]
    next_step: dict[str, Any] = Field(
        description="A dry run of the next compaction: action (none|condense|truncate|elide), "
        "the positions it would hide, how many messages and tokens, and why a condense is skipped."
    )
    message_count: int
    last_seq: int
    protected_tokens: int = Field(
        description="What the protected regions of the contexts above a thread add to its "
        "payload (0 for the root); tokens, budget and window are the thread's own."
    )


class ContextView(BudgetView):
    protected: list[ProtectedEntry] = Field(
        description="Those regions' messages, root first: they precede the thread's own."
    )
    messages: list[ContextEntry]
