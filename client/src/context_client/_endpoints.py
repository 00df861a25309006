"""Every call of the API, defined once.

Each method of :class:`Endpoints` builds a :class:`Call` (the request, whether it may be
repeated, how to read the answer). The ``@endpoint`` descriptor turns it into a method of the
client it is read from: on :class:`ContextClient` ``create_task(...)`` sends the call and returns
its answer, on :class:`AsyncContextClient` it returns a coroutine of the same answer. The
signature and the docstring are the builder's, for both; only the two transports differ.
"""

import dataclasses
import inspect
import uuid as uuid_module
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    get_args,
    overload,
)

import httpx

from context_client import expand, replies
from context_client._calls import Call, decoded, nothing, path, present, query
from context_client.sdk import SDK, sdk_kwargs
from context_client.types import (
    AppendResult,
    CandidatePage,
    ChatMessage,
    CompactionChoice,
    CompactionResult,
    ContextView,
    FinalSummary,
    Inheritance,
    Job,
    JobPage,
    JobStatus,
    MessagePage,
    MessageText,
    PayloadFormat,
    PlanEntry,
    PlanItemIn,
    PlanPage,
    RewindResult,
    Stats,
    SummaryPage,
    Task,
    TaskCreated,
    TaskKey,
    TaskPage,
    TaskStatus,
    Thread,
    ToolCall,
    ToolDefinition,
    ToolRecord,
    ToolRecordPage,
)

P = ParamSpec("P")
T = TypeVar("T")


class Sends(Protocol):
    """A client that sends a call and returns its answer (``ContextClient``)."""

    def _send(self, call: Call[T]) -> T: ...


class SendsAsync(Protocol):
    """A client that returns a coroutine of a call's answer (``AsyncContextClient``)."""

    def _send(self, call: Call[T]) -> Coroutine[Any, Any, T]: ...


IDEMPOTENCY_KEY = "Idempotency-Key"


class endpoint(Generic[P, T]):  # lower case: a decorator
    """A call builder, read as a method that sends the call (see the module's docstring)."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        # For help(): the builder's parameters without self, returning what the call answers.
        signature = inspect.signature(build)
        self.signature = signature.replace(
            parameters=list(signature.parameters.values())[1:],
            return_annotation=get_args(signature.return_annotation)[0],
        )

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: Sends, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, client: SendsAsync, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, client: Any, owner: type[Any]) -> Any:
        if client is None:
            return self
        build = self.build

        # The sync client's _send returns the answer, the async one's a coroutine of it.
        def send(*args: Any, **kwargs: Any) -> Any:
            return client._send(build(client, *args, **kwargs))

        send.__name__ = build.__name__
        send.__qualname__ = f"{type(client).__name__}.{build.__name__}"
        send.__doc__ = build.__doc__
        send.__signature__ = self.signature  # type: ignore[attr-defined]  # for help()
        return send


@dataclasses.dataclass(frozen=True)
class RecordedReply:
    """An LLM's answer as it was appended: the message (OpenAI's chat shape) and the service's
    answer (its seq, tokens...)."""

    message: ChatMessage
    result: AppendResult

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The calls to run, each to be answered by a tool message with its id."""
        return self.message.get("tool_calls", [])

    @property
    def text(self) -> str:
        """The answer's text ("" when there is none)."""
        content = self.message.get("content")
        if isinstance(content, str):
            return content
        parts = content or []
        return "".join(str(part.get("text") or part.get("refusal") or "") for part in parts)


def _thread(thread_id: int) -> int | None:
    return thread_id or None  # 0, the root context, is the service's default


def _append(
    uuid: str, body: Mapping[str, Any], thread_id: int, idempotency_key: str | None
) -> Call[Any]:
    """An append; its key is made once here, so every retry of this call carries the same one
    and the service appends it at most once."""
    return Call(
        "POST",
        path("tasks", uuid, "messages"),
        decoded,
        params=query(thread_id=_thread(thread_id)),
        json=body,
        headers={IDEMPOTENCY_KEY: idempotency_key or str(uuid_module.uuid4())},
    )


def _recorded(
    uuid: str, message: ChatMessage, thread_id: int, idempotency_key: str | None
) -> Call[RecordedReply]:
    def parse(response: httpx.Response) -> RecordedReply:
        return RecordedReply(message, response.json())

    return dataclasses.replace(_append(uuid, message, thread_id, idempotency_key), parse=parse)


class Endpoints:
    """The API's calls. Every method takes the task's uuid first where there is one;
    ``thread_id`` (default 0, the task's root context) names a thread of the task."""

    # -- tasks -----------------------------------------------------------------------------

    @endpoint
    def create_task(
        self,
        task_key: TaskKey,
        model: str,
        *,
        uuid: str | None = None,
        user: str | None = None,
        llm_provider: str | None = None,
        context_length: int | None = None,
        max_output_tokens: int | None = None,
        system_prompt: str | None = None,
        tools: Sequence[ToolDefinition] | None = None,
        request_defaults: Mapping[str, Any] | None = None,
        inherit: bool | None = None,
        summary_backend: str | None = None,
        hooks: Sequence[str] | None = None,
        pin_plan: bool | None = None,
        expand_tool: bool | None = None,
        compaction: CompactionChoice | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Call[TaskCreated]:
        """Create a task (the service's defaults for what is not given). Without ``uuid`` the
        client makes one, so that a retried create is the same create (the service answers it
        200 with the task)."""
        body = present(
            uuid=uuid or str(uuid_module.uuid4()),
            task_key=task_key,
            model=model,
            user=user,
            llm_provider=llm_provider,
            context_length=context_length,
            max_output_tokens=max_output_tokens,
            system_prompt=system_prompt,
            tools=None if tools is None else list(tools),
            request_defaults=None if request_defaults is None else dict(request_defaults),
            inherit=inherit,
            summary_backend=summary_backend,
            hooks=None if hooks is None else list(hooks),
            pin_plan=pin_plan,
            expand_tool=expand_tool,
            compaction=compaction,
            metadata=None if metadata is None else dict(metadata),
        )
        return Call("POST", "/tasks", decoded, json=body)

    @endpoint
    def get_task(self, uuid: str) -> Call[Task]:
        """The task with its statistics, context tokens, window and budget."""
        return Call("GET", path("tasks", uuid), decoded)

    @endpoint
    def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        user: str | None = None,
        task_source: str | None = None,
        owner: str | None = None,
        repo: str | None = None,
        task_type: str | None = None,
        task_id: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Call[TaskPage]:
        """Tasks, newest first; pass the page's ``next_cursor`` as ``cursor`` for the next."""
        params = query(
            status=status,
            user=user,
            task_source=task_source,
            owner=owner,
            repo=repo,
            task_type=task_type,
            task_id=task_id,
            created_after=created_after,
            created_before=created_before,
            cursor=cursor,
            limit=limit,
        )
        return Call("GET", "/tasks", decoded, params=params)

    @endpoint
    def stop_task(self, uuid: str) -> Call[Task]:
        """running -> paused."""
        return Call("POST", path("tasks", uuid, "stop"), decoded, idempotent=False)

    @endpoint
    def resume_task(self, uuid: str) -> Call[Task]:
        """paused -> running."""
        return Call("POST", path("tasks", uuid, "resume"), decoded, idempotent=False)

    @endpoint
    def complete_task(self, uuid: str) -> Call[Task]:
        """running or paused -> completed; a final summary is written in the background."""
        return Call("POST", path("tasks", uuid, "complete"), decoded, idempotent=False)

    @endpoint
    def fail_task(self, uuid: str, error_message: str) -> Call[Task]:
        """running or paused -> failed, with the error."""
        body = {"error_message": error_message}
        return Call("POST", path("tasks", uuid, "fail"), decoded, json=body, idempotent=False)

    @endpoint
    def delete_task(self, uuid: str) -> Call[None]:
        """Remove the task, its files and its jobs (an admin key, when keys are set)."""
        return Call("DELETE", path("tasks", uuid), nothing, idempotent=False)

    # -- messages --------------------------------------------------------------------------

    @endpoint
    def append(
        self,
        uuid: str,
        message: ChatMessage,
        *,
        thread_id: int = 0,
        idempotency_key: str | None = None,
    ) -> Call[AppendResult]:
        """Append one message, durably. It carries an ``Idempotency-Key`` (``idempotency_key``,
        or a new uuid4 kept across this call's retries): a retry never appends it twice."""
        return _append(uuid, message, thread_id, idempotency_key)

    @endpoint
    def append_batch(
        self,
        uuid: str,
        messages: Sequence[ChatMessage],
        *,
        thread_id: int = 0,
        idempotency_key: str | None = None,
    ) -> Call[AppendResult]:
        """Append messages all or nothing (an assistant's tool calls and their results, say);
        idempotent as :meth:`append`."""
        return _append(uuid, {"messages": list(messages)}, thread_id, idempotency_key)

    @endpoint
    def list_messages(
        self, uuid: str, *, after_seq: int = 0, limit: int | None = None, thread_id: int = 0
    ) -> Call[MessagePage]:
        """A page of the full history (markers included); pass ``next_after_seq`` as
        ``after_seq`` for the next one (None: this was the last)."""
        params = query(after_seq=after_seq or None, limit=limit, thread_id=_thread(thread_id))
        return Call("GET", path("tasks", uuid, "messages"), decoded, params=params)

    @endpoint
    def message_text(
        self,
        uuid: str,
        seq: int,
        *,
        start: int = 0,
        end: int | None = None,
        max_bytes: int | None = None,
        thread_id: int = 0,
    ) -> Call[MessageText]:
        """Characters [start, end) of message ``seq``'s text as posted, at most ``max_bytes``
        of it (the service's default: 16 KiB); ``next_start`` goes on where it stopped."""
        params = query(
            start=start or None, end=end, max_bytes=max_bytes, thread_id=_thread(thread_id)
        )
        return Call("GET", path("tasks", uuid, "messages", seq), decoded, params=params)

    @endpoint
    def expand_result(
        self, uuid: str, tool_call: Mapping[str, Any], *, thread_id: int = 0
    ) -> Call[ChatMessage]:
        """The tool result that answers the model's ``context_expand`` call (in OpenAI's shape,
        as ``RecordedReply.tool_calls`` has it): the span it asks for, or why the service
        refused it (an unknown seq, a bad range); append it like any tool result."""
        seq, params = expand.expand_query(tool_call)
        return Call(
            "GET",
            path("tasks", uuid, "messages", seq),
            lambda response: expand.expand_result_message(tool_call, response.json()),
            params={**params, "thread_id": _thread(thread_id)},
            recover=lambda error: expand.expand_refusal(tool_call, error),
        )

    # -- LLM helpers -----------------------------------------------------------------------

    @endpoint
    def record_openai(
        self,
        uuid: str,
        completion: replies.Answer,
        *,
        thread_id: int = 0,
        idempotency_key: str | None = None,
    ) -> Call[RecordedReply]:
        """Append an OpenAI ``ChatCompletion`` (the SDK's object or its JSON) as the assistant
        message, with its tool calls and usage."""
        message = replies.openai_reply(completion)
        return _recorded(uuid, message, thread_id, idempotency_key)

    @endpoint
    def record_anthropic(
        self,
        uuid: str,
        message: replies.Answer,
        *,
        thread_id: int = 0,
        idempotency_key: str | None = None,
    ) -> Call[RecordedReply]:
        """Append an Anthropic ``Message`` (the SDK's object or its JSON) as the assistant
        message, with its tool calls and usage."""
        reply = replies.anthropic_reply(message)
        return _recorded(uuid, reply, thread_id, idempotency_key)

    @endpoint
    def record_ollama(
        self,
        uuid: str,
        response: Mapping[str, Any],
        *,
        thread_id: int = 0,
        idempotency_key: str | None = None,
    ) -> Call[RecordedReply]:
        """Append an Ollama ``/api/chat`` answer as the assistant message, with its tool calls
        (ids made for those without) and its token counts."""
        message = replies.ollama_reply(response)
        return _recorded(uuid, message, thread_id, idempotency_key)

    # -- the payload and the context -------------------------------------------------------

    @endpoint
    def request_payload(
        self, uuid: str, *, format: PayloadFormat | None = None, thread_id: int = 0
    ) -> Call[dict[str, Any]]:
        """The next LLM request, ready to send as the provider's HTTP body, within the budget
        (``format``: default the task's ``llm_provider``'s)."""
        params = query(format=format, thread_id=_thread(thread_id))
        return Call("GET", path("tasks", uuid, "request"), decoded, params=params)

    @endpoint
    def request_kwargs(
        self,
        uuid: str,
        *,
        sdk: SDK,
        format: PayloadFormat | None = None,
        thread_id: int = 0,
    ) -> Call[dict[str, Any]]:
        """The next LLM request as keyword arguments of the installed ``sdk``'s ``create()``
        (``client.chat.completions.create`` or ``client.messages.create``): what it does not
        take by name is in ``extra_body``, so the wire request is the payload (see sdk.py).
        ``format`` defaults to the SDK's own; "lmstudio" suits the openai SDK too."""
        params = query(format=format or sdk, thread_id=_thread(thread_id))

        def parse(response: httpx.Response) -> dict[str, Any]:
            return sdk_kwargs(response.json(), sdk)

        return Call("GET", path("tasks", uuid, "request"), parse, params=params)

    @endpoint
    def get_context(
        self, uuid: str, *, format: PayloadFormat | None = None, thread_id: int = 0
    ) -> Call[ContextView]:
        """The effective context with per-message tokens, budget, threshold, and a dry run of
        the next compaction."""
        params = query(format=format, thread_id=_thread(thread_id))
        return Call("GET", path("tasks", uuid, "context"), decoded, params=params)

    # -- compaction ------------------------------------------------------------------------

    @endpoint
    def compress(
        self,
        uuid: str,
        *,
        strategy: Literal["auto", "mask", "condense", "truncate"] = "auto",
        backend: str | None = None,
        thread_id: int = 0,
    ) -> Call[CompactionResult]:
        """Compact a context now."""
        body = present(strategy=strategy, backend=backend)
        params = query(thread_id=_thread(thread_id))
        route = path("tasks", uuid, "compress")
        return Call("POST", route, decoded, params=params, json=body, idempotent=False)

    @endpoint
    def rewind(
        self, uuid: str, to_seq: int, *, include_target: bool = False, thread_id: int = 0
    ) -> Call[RewindResult]:
        """Take the history after ``to_seq`` (and the target, unless ``include_target``) out
        of the context; nothing is deleted from the history."""
        body = {"to_seq": to_seq, "include_target": include_target}
        params = query(thread_id=_thread(thread_id))
        route = path("tasks", uuid, "rewind")
        return Call("POST", route, decoded, params=params, json=body, idempotent=False)

    @endpoint
    def list_summaries(
        self, uuid: str, *, after_id: int = 0, limit: int | None = None, thread_id: int = 0
    ) -> Call[SummaryPage]:
        """A context's compactions (condense summaries, truncations, elisions), paged by id."""
        params = query(after_id=after_id or None, limit=limit, thread_id=_thread(thread_id))
        return Call("GET", path("tasks", uuid, "summaries"), decoded, params=params)

    # -- threads ---------------------------------------------------------------------------

    @endpoint
    def start_thread(
        self,
        uuid: str,
        *,
        parent_thread_id: int = 0,
        label: str | None = None,
        window_ratio: float | None = None,
        max_depth: int | None = None,
        chronicle_prompt: str | None = None,
    ) -> Call[Thread]:
        """Start a nested context under the root (0) or another active thread."""
        body = present(
            parent_thread_id=parent_thread_id,
            label=label,
            window_ratio=window_ratio,
            max_depth=max_depth,
            chronicle_prompt=chronicle_prompt,
        )
        route = path("tasks", uuid, "threads")
        return Call("POST", route, decoded, json=body, idempotent=False)

    @endpoint
    def thread_tree(self, uuid: str) -> Call[Thread]:
        """The task's contexts as a tree, from the root (thread 0)."""
        return Call("GET", path("tasks", uuid, "threads"), decoded)

    @endpoint
    def get_thread(self, uuid: str, thread_id: int) -> Call[Thread]:
        """One thread and the threads under it."""
        return Call("GET", path("tasks", uuid, "threads", thread_id), decoded)

    @endpoint
    def end_thread(
        self,
        uuid: str,
        thread_id: int,
        *,
        generate_chronicle: bool = True,
        cascade: bool = False,
        abort: bool = False,
    ) -> Call[Thread]:
        """Complete a thread (``abort``: abort it); its chronicle is written by a job into its
        record and its parent's context. ``cascade`` aborts the active threads under it."""
        body = {"generate_chronicle": generate_chronicle, "cascade": cascade}
        route = path("tasks", uuid, "threads", thread_id, "abort" if abort else "end")
        return Call("POST", route, decoded, json=body, idempotent=False)

    # -- planning and tool records ---------------------------------------------------------

    @endpoint
    def add_plan_entry(
        self,
        uuid: str,
        plan_type: str,
        *,
        plan_content: str | dict[str, Any] | list[Any] | None = None,
        items: Sequence[PlanItemIn] | None = None,
    ) -> Call[PlanEntry]:
        """Record a planning step: free text (or JSON), a checklist replacing the current
        items, or both."""
        body = present(
            plan_type=plan_type,
            plan_content=plan_content,
            items=None if items is None else list(items),
        )
        route = path("tasks", uuid, "planning")
        return Call("POST", route, decoded, json=body, idempotent=False)

    @endpoint
    def list_plan_entries(
        self, uuid: str, *, after_id: int = 0, limit: int | None = None
    ) -> Call[PlanPage]:
        """Planning history, oldest first, and the current plan items."""
        params = query(after_id=after_id or None, limit=limit)
        return Call("GET", path("tasks", uuid, "planning"), decoded, params=params)

    @endpoint
    def add_tool_record(
        self,
        uuid: str,
        tool: str,
        *,
        args: Mapping[str, Any] | None = None,
        result: Any = None,
        status: Literal["success", "error"] = "success",
        error: str | None = None,
        duration_ms: int | None = None,
        tool_call_id: str | None = None,
    ) -> Call[ToolRecord]:
        """Record one tool execution in the task's tool log (not its context)."""
        body = present(
            tool=tool,
            args=None if args is None else dict(args),
            result=result,
            status=status,
            error=error,
            duration_ms=duration_ms,
            tool_call_id=tool_call_id,
        )
        return Call("POST", path("tasks", uuid, "tools"), decoded, json=body, idempotent=False)

    @endpoint
    def list_tool_records(
        self, uuid: str, *, after_seq: int = 0, limit: int | None = None
    ) -> Call[ToolRecordPage]:
        """Tool execution records, paged by seq."""
        params = query(after_seq=after_seq or None, limit=limit)
        return Call("GET", path("tasks", uuid, "tools"), decoded, params=params)

    # -- after the run ---------------------------------------------------------------------

    @endpoint
    def get_final_summary(self, uuid: str) -> Call[FinalSummary]:
        """The summary a finished task left (``status`` "pending" while its job runs)."""
        return Call("GET", path("tasks", uuid, "final-summary"), decoded)

    @endpoint
    def get_inheritance(self, uuid: str) -> Call[Inheritance]:
        """What the task inherited from an earlier run of its key, at creation."""
        return Call("GET", path("tasks", uuid, "inheritance"), decoded)

    @endpoint
    def inheritance_candidates(
        self, task_key: TaskKey, *, user: str | None = None, limit: int | None = None
    ) -> Call[CandidatePage]:
        """The finished runs a new task of this key and user would inherit from, newest
        first."""
        params = query(**task_key, user=user, limit=limit)
        return Call("GET", "/inheritance/candidates", decoded, params=params)

    # -- jobs and statistics ---------------------------------------------------------------

    @endpoint
    def get_job(self, job_id: int) -> Call[Job]:
        """One background job with its status, attempts, error and result."""
        return Call("GET", path("jobs", job_id), decoded)

    @endpoint
    def list_jobs(
        self,
        *,
        task_uuid: str | None = None,
        status: JobStatus | None = None,
        limit: int | None = None,
    ) -> Call[JobPage]:
        """Background jobs, newest first."""
        params = query(task_uuid=task_uuid, status=status, limit=limit)
        return Call("GET", "/jobs", decoded, params=params)

    @endpoint
    def get_stats(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        user: str | None = None,
        owner: str | None = None,
        repo: str | None = None,
        task_source: str | None = None,
        running_limit: int | None = None,
    ) -> Call[Stats]:
        """Tasks by status and user, running tasks, latest failures, tokens and LLM calls
        (``since`` <= created_at < ``until``)."""
        params = query(
            since=since,
            until=until,
            user=user,
            owner=owner,
            repo=repo,
            task_source=task_source,
            running_limit=running_limit,
        )
        return Call("GET", "/stats", decoded, params=params)
