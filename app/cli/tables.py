"""The service's JSON answers as text for a terminal: pure functions, no I/O."""

from typing import Any

from tabulate import tabulate

ERROR_WIDTH = 60  # a job's error is cut to this in a listing (``--json`` has it whole)


def tasks(page: dict[str, Any]) -> str:
    rows = [
        (
            task["uuid"],
            task["status"],
            task_key(task["task_key"]),
            task["user"] or "",
            task["model"],
            task["statistics"]["total_messages"],
            task["statistics"]["total_tokens"],
            _time(task["created_at"]),
        )
        for task in page["tasks"]
    ]
    headers = ("uuid", "status", "task key", "user", "model", "messages", "tokens", "created")
    text = tabulate(rows, headers, disable_numparse=True) if rows else "no tasks"
    if page.get("next_cursor"):
        text += f"\nmore: --cursor {page['next_cursor']}"
    return text


def task(record: dict[str, Any]) -> str:
    statistics = record["statistics"]
    rows: list[tuple[str, Any]] = [
        ("uuid", record["uuid"]),
        ("status", record["status"]),
        ("task key", task_key(record["task_key"])),
        ("user", record["user"]),
        ("model", f"{record['llm_provider'] or '-'} / {record['model']}"),
        ("window", record["context_length"]),
        ("created", _time(record["created_at"])),
        ("started", _time(record["started_at"])),
        ("completed", _time(record["completed_at"])),
        ("error", record["error_message"]),
        ("inherited from", record["inherited_from"]),
        ("messages", statistics["total_messages"]),
        ("LLM calls", statistics["llm_call_count"]),
        ("tool calls", statistics["tool_call_count"]),
        ("tokens (reported)", statistics["total_tokens"]),
        ("compactions", statistics["compression_count"]),
    ]
    context = record.get("context")
    if context:
        rows += [
            (
                "context tokens",
                f"{context['tokens']} of {context['budget']} (compacts at {context['threshold']})",
            ),
            ("context messages", context["messages"]),
            ("token counter", context["token_counter"]),
        ]
    return tabulate([(k, "" if v is None else v) for k, v in rows], tablefmt="plain")


def jobs(page: dict[str, Any]) -> str:
    rows = [
        (
            job["id"],
            job["task_uuid"],
            job["thread_id"],
            job["kind"],
            job["status"],
            f"{job['attempts']}/{job['max_attempts']}",
            _time(job["created_at"]),
            _time(job["finished_at"]),
            _cut(job["error"] or "", ERROR_WIDTH),
        )
        for job in page["jobs"]
    ]
    headers = ("id", "task", "thread", "kind", "status", "attempts", "created", "finished", "error")
    return tabulate(rows, headers, disable_numparse=True) if rows else "no jobs"


def stats(figures: dict[str, Any]) -> str:
    by_status = figures["by_status"]
    tokens = figures["tokens"]["all"]
    calls = figures["calls"]
    duration = figures["average_duration_s"]
    summary = [
        ("tasks", figures["total_tasks"]),
        *((f"  {status}", count) for status, count in by_status.items()),
        ("tokens (reported)", tokens["total"]),
        ("LLM calls", calls["llm_calls"]),
        ("tool calls", calls["tool_calls"]),
        ("compactions", calls["compressions"]),
        ("mean duration", "" if duration is None else f"{duration:.1f} s"),
    ]
    sections = [tabulate(summary, tablefmt="plain")]
    users = [
        (user["user"] or "(none)", user["total"], *user["by_status"].values())
        for user in figures["by_user"]
    ]
    if users:
        headers = ("user", "tasks", *by_status)
        sections.append(tabulate(users, headers, disable_numparse=True))
    failures = [
        (failure["uuid"], task_key(failure["task_key"]), _cut(failure["error_message"] or "", 60))
        for failure in figures["latest_failures"]
    ]
    if failures:
        sections.append("latest failures\n" + tabulate(failures, ("uuid", "task key", "error")))
    return "\n\n".join(sections)


def task_key(key: dict[str, str]) -> str:
    """``github:owner/repo issue 27``."""
    return f"{key['task_source']}:{key['owner']}/{key['repo']} {key['task_type']} {key['task_id']}"


def _time(value: str | None) -> str:
    """An ISO timestamp to the second, as ``2026-11-26 19:05:44``."""
    return "" if value is None else value[:19].replace("T", " ")


def _cut(text: str, width: int) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width and line == text else line[: width - 1] + "…"
