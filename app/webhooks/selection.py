"""Which configured hooks a task's transition calls. Pure."""

from collections.abc import Iterable, Mapping

from app.config import WebhookConfig, WebhookEvent
from app.errors import ErrorCode, InvalidInput

# The lifecycle action -> the event its hooks hear (resume has none).
EVENTS: dict[str, WebhookEvent] = {"complete": "completed", "stop": "stopped", "fail": "failed"}


def check_chosen(configured: Mapping[str, WebhookConfig], chosen: Iterable[str]) -> None:
    """Every name a task chose is configured on the server (a request never gives a URL)."""
    unknown = [name for name in chosen if name not in configured]
    if unknown:
        raise InvalidInput(
            f"no webhook named {unknown[0]!r} is configured",
            code=ErrorCode.UNKNOWN_WEBHOOK,
            details={"unknown": unknown, "configured": sorted(configured)},
        )


def hooks_for(
    configured: Mapping[str, WebhookConfig], chosen: Iterable[str], event: WebhookEvent
) -> list[str]:
    """The hooks to call for ``event``: every all-tasks hook and the task's own, once each."""
    chosen = set(chosen)
    return [
        name
        for name, hook in sorted(configured.items())
        if event in hook.events and (hook.all_tasks or name in chosen)
    ]
