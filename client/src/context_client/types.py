"""The shapes of the service's bodies and answers, as the JSON decodes them (times are ISO 8601
strings). Each mirrors a schema of the service's OpenAPI document; a test keeps them in step."""

from typing import Any, Literal, NotRequired, Required, TypedDict

TaskStatus = Literal["running", "paused", "completed", "failed"]
PayloadFormat = Literal["openai", "lmstudio", "anthropic", "ollama"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "skipped"]
PlanStatus = Literal["pending", "active", "done", "cancelled"]


class TaskKey(TypedDict):
    """The issue or pull request a task works on; runs of one key follow one another."""

    task_source: str
    owner: str
    repo: str
    task_type: str
    task_id: str


# -- messages --------------------------------------------------------------------------------


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    """A message in OpenAI's chat shape, the service's canonical one (``tool_name`` names the
    tool on a result; ``usage`` on an assistant message is its LLM call's)."""

    role: Required[Literal["system", "user", "assistant", "tool"]]
    content: str | list[dict[str, Any]] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str
    tool_name: str
    usage: dict[str, int]


class FunctionDefinition(TypedDict, total=False):
    name: Required[str]
    description: str
    parameters: dict[str, Any]
    strict: bool


class ToolDefinition(TypedDict):
    """A tool the model may call, in OpenAI's form (the service converts it per format)."""

    type: Literal["function"]
    function: FunctionDefinition


class AppendResult(TypedDict):
    seqs: list[int]
    tokens: list[int]
    context_tokens: int
    compaction_scheduled: bool


class MessageRecord(TypedDict, total=False):
    """A line of the history: the message as posted, plus what the service added. A marker
    record (a compaction or rewind) has ``type`` "marker" and may have no role."""

    seq: Required[int]
    timestamp: Required[str]
    tokens: Required[int]
    role: str | None
    content: Any
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str
    tool_name: str
    usage: dict[str, Any]
    type: str


class MessagePage(TypedDict):
    messages: list[MessageRecord]
    last_seq: int
    next_after_seq: int | None


class MessageText(TypedDict):
    """Characters [start, end) of a message's text as posted (GET /messages/{seq})."""

    seq: int
    role: str | None
    tool_call_id: str | None
    tool_name: str | None
    marker: str | None
    tool_calls: list[ToolCall] | None
    text: str
    total_chars: int
    start: int
    end: int
    cut: bool
    next_start: int | None


# -- tasks -----------------------------------------------------------------------------------


class CompactionChoice(TypedDict, total=False):
    tiers: list[Literal["mask", "condense", "truncate", "elide"]]
    keep_tool_results: int


class TaskStatistics(TypedDict):
    total_messages: int
    llm_call_count: int
    tool_call_count: int
    total_tokens: int
    compression_count: int
    total_summaries: int
    final_token_count: int | None
    final_message_count: int | None


class ContextSummary(TypedDict):
    tokens: int
    messages: int
    last_seq: int
    window: int
    budget: int
    threshold: int
    reserved_output: int
    token_counter: str
    calibration: float


class Task(TypedDict):
    uuid: str
    status: TaskStatus
    task_key: TaskKey
    user: str | None
    llm_provider: str | None
    model: str
    context_length: int
    max_output_tokens: int
    created_at: str
    started_at: str | None
    updated_at: str
    completed_at: str | None
    error_message: str | None
    metadata: dict[str, Any]
    inherited_from: str | None
    hooks: list[str]
    pin_plan: bool
    expand_tool: bool
    statistics: TaskStatistics
    context: ContextSummary | None  # null in lists


class InheritanceRecord(TypedDict):
    from_uuid: str
    status: TaskStatus
    completed_at: str | None
    error_message: str | None
    summary_source: Literal["final_summary", "condense_summary", "none"]
    planning_entries: int
    truncated: bool
    tokens: int
    max_summary_tokens: int
    seq: int
    notification_comment: str


class RunningSiblings(TypedDict):
    count: int  # other running tasks on the same task key and user
    uuids: list[str]  # the newest of them


class TaskCreated(Task):
    inheritance: InheritanceRecord | None
    notification_comment: str | None
    running_siblings: RunningSiblings


class TaskPage(TypedDict):
    tasks: list[Task]
    next_cursor: str | None


class Inheritance(TypedDict):
    uuid: str
    inherited_from: str | None
    inheritance: InheritanceRecord | None
    notification_comment: str | None


class Candidate(TypedDict):
    uuid: str
    status: TaskStatus
    completed_at: str | None
    error_message: str | None
    final_summary_ready: bool


class CandidatePage(TypedDict):
    candidates: list[Candidate]


# -- the effective context -------------------------------------------------------------------


class Calibration(TypedDict):
    factor: float
    samples: int
    estimated_real_tokens: int


class CompactionOptions(TypedDict):
    tiers: list[str]
    keep_tool_results: int


class ContextEntry(TypedDict):
    index: int
    tokens: int
    message: dict[str, Any]


class ProtectedEntry(TypedDict):
    thread_id: int
    tokens: int
    message: dict[str, Any]


class ContextView(TypedDict):
    uuid: str
    thread_id: int
    format: PayloadFormat
    tokens: int
    budget: int
    threshold: int
    window: int
    reserved_output: int
    tools_tokens: int
    token_counter: str
    calibration: Calibration
    compaction: CompactionOptions
    next_action: Literal["none", "condense", "over_budget"]
    next_step: dict[str, Any]
    message_count: int
    last_seq: int
    protected_tokens: int
    protected: list[ProtectedEntry]
    messages: list[ContextEntry]


class CompactionResult(TypedDict):
    kind: Literal["mask", "condense", "truncation", "elision", "skipped"]
    reason: str | None
    summary_id: int | None
    hidden_messages: int
    tokens_before: int
    tokens_after: int


class RewindResult(TypedDict):
    last_seq: int
    messages: int
    context_tokens: int


class SummaryRecord(TypedDict):
    id: int
    kind: str
    start_seq: int
    end_seq: int
    summary: str
    original_tokens: int
    summary_tokens: int
    created_at: str


class SummaryPage(TypedDict):
    summaries: list[SummaryRecord]
    next_after_id: int | None


# -- threads, planning, tool records ---------------------------------------------------------


class Thread(TypedDict):
    thread_id: int
    parent_thread_id: int | None
    depth: int
    window_ratio: float
    window: int
    status: Literal["active", "completed", "aborted"]
    label: str | None
    chronicle_prompt: str | None
    chronicle_summary: str | None
    message_count: int
    created_at: str | None
    completed_at: str | None
    children: list["Thread"]


class PlanItemIn(TypedDict, total=False):
    id: str
    text: Required[str]
    status: PlanStatus


class PlanItem(TypedDict):
    id: str
    text: str
    status: PlanStatus


class PlanEntry(TypedDict):
    id: int
    plan_type: str
    plan_content: str | dict[str, Any] | list[Any]
    items: NotRequired[list[PlanItem]]
    created_at: str


class PlanPage(TypedDict):
    planning: list[PlanEntry]
    next_after_id: int | None
    current_items: list[PlanItem]
    current_entry_id: int | None


class ToolRecord(TypedDict, total=False):
    seq: Required[int]
    tool: Required[str]
    args: Required[dict[str, Any]]
    status: Required[str]
    timestamp: Required[str]
    result: Any
    error: str
    duration_ms: int
    tool_call_id: str


class ToolRecordPage(TypedDict):
    tools: list[ToolRecord]
    next_after_seq: int | None


# -- jobs, final summaries, statistics -------------------------------------------------------


class Job(TypedDict):
    id: int
    task_uuid: str
    thread_id: int
    kind: str
    status: JobStatus
    attempts: int
    max_attempts: int
    error: str | None
    result: dict[str, Any] | None
    not_before: str
    created_at: str
    started_at: str | None
    finished_at: str | None


class JobPage(TypedDict):
    jobs: list[Job]


class FinalSummary(TypedDict):
    uuid: str
    status: Literal["ready", "pending", "failed"]
    summary: str | None
    summarizer: str | None
    job: Job | None


class StatsFilters(TypedDict, total=False):
    since: str | None
    until: str | None
    user: str | None
    owner: str | None
    repo: str | None
    task_source: str | None


class StatusCounts(TypedDict):
    running: int
    paused: int
    completed: int
    failed: int


class UserCounts(TypedDict):
    user: str | None
    total: int
    by_status: StatusCounts


class RunningTask(TypedDict):
    uuid: str
    task_key: TaskKey
    user: str | None
    started_at: str | None


class RunningTasks(TypedDict):
    total: int
    tasks: list[RunningTask]


class Failure(TypedDict):
    uuid: str
    task_key: TaskKey
    user: str | None
    error_message: str | None
    created_at: str
    completed_at: str | None


class TokenUsage(TypedDict):
    tasks: int
    total: int
    average: float | None


class TokenTotals(TypedDict):
    completed: TokenUsage
    all: TokenUsage


class CallTotals(TypedDict):
    llm_calls: int
    tool_calls: int
    compressions: int


class Stats(TypedDict):
    filters: StatsFilters
    total_tasks: int
    by_status: StatusCounts
    by_user: list[UserCounts]
    running: RunningTasks
    latest_failures: list[Failure]
    average_duration_s: float | None
    tokens: TokenTotals
    calls: CallTotals
