"""Task bodies and answers."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.budgets.windows import MIN_WINDOW
from app.config import CompactionTier, check_tiers
from app.db.base import DBJSON, DBText
from app.inheritance.schemas import InheritanceRecord
from app.lifecycle import TaskStatus
from app.messages.expand_tool import EXPAND_TOOL_NAME
from app.task_key import TaskKey

# Payload keys the service itself sets; request defaults may not override them.
RESERVED_REQUEST_KEYS = frozenset({"model", "messages", "tools", "stream", "system"})


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = Field(None, strict=True)


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: FunctionDefinition


class CompactionChoice(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"tiers": ["mask", "condense", "elide"]}]},
    )
    tiers: list[CompactionTier] | None = Field(
        None,
        min_length=1,
        description="mask, condense, truncate, elide: each once, in the order to try them; "
        "elide (the one that always fits) among them.",
    )
    keep_tool_results: int | None = Field(None, strict=True, ge=0, le=10_000)

    @field_validator("tiers")
    @classmethod
    def _tiers_fit(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(check_tiers(tuple(value)))


class TaskCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "uuid": "550e8400-e29b-41d4-a716-446655440000",
                    "task_key": {
                        "task_source": "github",
                        "owner": "notfolder",
                        "repo": "coding_agent",
                        "task_type": "issue",
                        "task_id": "27",
                    },
                    "user": "notfolder",
                    "llm_provider": "openai",
                    "model": "gpt-4o",
                    "context_length": 128000,
                    "max_output_tokens": 4096,
                    "system_prompt": "You are a coding agent ...",
                    "tools": [
                        {
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "parameters": {
                                    "type": "object",
                                    "properties": {"path": {"type": "string"}},
                                },
                            },
                        }
                    ],
                    "request_defaults": {"temperature": 0.2},
                    "metadata": {},
                }
            ]
        },
    )

    uuid: UUID | None = Field(
        None, description="Assigned by the agent's queue; generated if absent."
    )
    task_key: TaskKey
    user: DBText | None = Field(None, max_length=255)
    llm_provider: DBText = Field("openai", min_length=1, max_length=64)
    model: DBText = Field(min_length=1, max_length=255)
    context_length: int | None = Field(None, strict=True, ge=MIN_WINDOW, le=100_000_000)
    max_output_tokens: int | None = Field(None, strict=True, ge=1)
    system_prompt: str | None = Field(None, description="Becomes message seq 1.")
    tools: list[ToolDefinition] | None = None
    request_defaults: dict[str, Any] = Field(
        default_factory=dict, description="Merged into every payload (temperature, ...)."
    )
    inherit: bool | None = Field(None, strict=True)
    summary_backend: DBText | None = Field(
        None,
        max_length=64,
        description="A configured LLM backend, by name, for this task's summaries; "
        "'extractive' for the embedded one. Never a URL.",
    )
    hooks: list[DBText] = Field(
        default_factory=list,
        max_length=32,
        description="Named webhooks configured on the server (WEBHOOKS) to call for this task's "
        "completion, stop and failure. Never a URL.",
    )
    pin_plan: bool = Field(
        False,
        strict=True,
        description="Keep the latest planning entry in every payload, right after the first user "
        "message, counted in the budget: compaction never loses the current plan.",
    )
    expand_tool: bool = Field(
        False,
        strict=True,
        description=f"Offer the model the {EXPAND_TOOL_NAME} tool in every payload (counted in "
        "the budget like the task's tools): it shows again what a masked result's placeholder or "
        "an elision's note points at. The agent answers a call from "
        "GET /tasks/{uuid}/messages/{seq}.",
    )
    compaction: CompactionChoice | None = Field(
        None,
        description="This task's own compaction: its tiers in order and how many of the newest "
        "tool results masking keeps (default: COMPACTION_TIERS, KEEP_TOOL_RESULTS).",
    )
    metadata: DBJSON = Field(default_factory=dict)

    @field_validator("hooks")
    @classmethod
    def _each_hook_once(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _expand_tool_name_free(self) -> "TaskCreate":
        names = {tool.function.name for tool in self.tools or ()}
        if self.expand_tool and EXPAND_TOOL_NAME in names:
            raise ValueError(
                f"tools may not define {EXPAND_TOOL_NAME} when expand_tool is true: the service "
                "adds its own"
            )
        return self

    @field_validator("request_defaults")
    @classmethod
    def _no_reserved_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = RESERVED_REQUEST_KEYS & value.keys()
        if clash:
            raise ValueError(f"request_defaults may not set {sorted(clash)}")
        return value


class TaskStatistics(BaseModel):
    total_messages: int
    llm_call_count: int
    tool_call_count: int
    total_tokens: int = Field(description="Prompt + completion tokens reported by LLM calls.")
    compression_count: int
    total_summaries: int
    final_token_count: int | None
    final_message_count: int | None


class ContextSummary(BaseModel):
    tokens: int = Field(
        description="Counted tokens of the payload /request would serve now, in the format of "
        "the task's llm_provider."
    )
    messages: int = Field(description="Messages in the effective context.")
    last_seq: int
    window: int
    budget: int = Field(
        description="allowed = (window * (1 - buffer) - reserved output) / calibration."
    )
    threshold: int
    reserved_output: int
    token_counter: str = Field(description="o200k_base, cl100k_base or heuristic")
    calibration: float = Field(description="Real tokens per counted token, by reported usage.")


class TaskOut(BaseModel):
    uuid: str
    status: TaskStatus
    task_key: TaskKey
    user: str | None
    llm_provider: str | None
    model: str
    context_length: int
    max_output_tokens: int
    created_at: datetime
    started_at: datetime | None
    updated_at: datetime
    completed_at: datetime | None
    error_message: str | None
    metadata: dict[str, Any]
    inherited_from: str | None
    hooks: list[str]
    pin_plan: bool
    expand_tool: bool
    statistics: TaskStatistics
    context: ContextSummary | None = Field(
        None, description="Present on single-task answers, absent in lists."
    )


class RunningSiblings(BaseModel):
    count: int = Field(description="How many other tasks on this task key and user are running.")
    uuids: list[str] = Field(description="The newest of them, at most 20.")


class TaskCreated(TaskOut):
    inheritance: InheritanceRecord | None = None
    notification_comment: str | None = Field(
        None, description="For the agent to post on the issue (previous uuid, status, time)."
    )
    running_siblings: RunningSiblings = Field(
        default_factory=lambda: RunningSiblings(count=0, uuids=[]),
        description="Other tasks on the same task key and user that are still running: a "
        "duplicate run of one issue, perhaps. Creating the task was not refused.",
    )


class TaskPage(BaseModel):
    tasks: list[TaskOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class FailBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    error_message: DBText = Field(min_length=1, max_length=100_000)
