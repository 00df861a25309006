"""Task rows and heads as API answers."""

from app.inheritance.presenters import inherited
from app.task_key import TaskKey
from app.tasks.schemas import (
    ContextSummary,
    RunningSiblings,
    TaskCreated,
    TaskOut,
    TaskStatistics,
)
from app.tasks.views import TaskView


def task_out(view: TaskView, cls: type[TaskOut] = TaskOut) -> TaskOut:
    task = view.task
    context = None
    if view.head is not None:
        assert view.payload_tokens is not None
        context = ContextSummary(
            tokens=view.payload_tokens,
            messages=view.head.current_messages,
            last_seq=view.head.last_seq,
            window=view.budget.window,
            budget=view.budget.allowed,
            threshold=view.budget.threshold,
            reserved_output=view.budget.reserved_output,
            token_counter=task.token_counter,
            calibration=task.token_calibration,
        )
    return cls(
        uuid=task.uuid,
        status=task.status,
        task_key=TaskKey(
            task_source=task.task_source,
            owner=task.owner,
            repo=task.repo,
            task_type=task.task_type,
            task_id=task.task_id,
        ),
        user=task.user,
        llm_provider=task.llm_provider,
        model=task.model,
        context_length=task.context_length,
        max_output_tokens=task.max_output_tokens,
        created_at=task.created_at,
        started_at=task.started_at,
        updated_at=task.updated_at,
        completed_at=task.completed_at,
        error_message=task.error_message,
        metadata=task.metadata_,
        inherited_from=task.inherited_from,
        hooks=task.hooks or [],
        pin_plan=task.pin_plan,
        expand_tool=task.expand_tool,
        statistics=TaskStatistics(
            total_messages=task.total_messages,
            llm_call_count=task.llm_call_count,
            tool_call_count=task.tool_call_count,
            total_tokens=task.total_tokens,
            compression_count=task.compression_count,
            total_summaries=task.total_summaries,
            final_token_count=task.final_token_count,
            final_message_count=task.final_message_count,
        ),
        context=context,
    )


def task_created(view: TaskView) -> TaskCreated:
    created = task_out(view, TaskCreated)
    assert isinstance(created, TaskCreated)
    created.inheritance, created.notification_comment = inherited(view.task)
    if view.siblings is not None:
        created.running_siblings = RunningSiblings(
            count=view.siblings.count, uuids=view.siblings.uuids
        )
    return created
