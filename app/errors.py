"""The service's error tree and the one place where errors become HTTP answers.

    AppError                      500 internal_error
     ├── Unauthorized             401  (no key, unknown key)
     ├── Forbidden                403  (admin_key_required, key_scope_too_narrow, out_of_scope)
     ├── NotFound                 404  (task_not_found, ...)
     ├── Conflict                 409  (invalid_transition, task_not_writable, ...)
     ├── TooLarge                 413  (body_too_large, message_too_large, context_over_budget)
     ├── InvalidInput             422  (validation_error, json_too_deep, reserved_field, ...)
     └── StorageError             500  (task_files_damaged, task_metadata_missing, ...)
          ├── InsufficientStorage 507  (the disk of CONTEXT_DIR or the database is full)
          └── StorageUnavailable  503  (CONTEXT_DIR or the database cannot be written)

Every error leaves the service as ``{"error": {"code", "message", "details"}}``.
"""

from typing import Any, ClassVar

from pydantic import BaseModel


class AppError(Exception):
    status_code: ClassVar[int] = 500
    default_code: ClassVar[str] = "internal_error"
    headers: ClassVar[dict[str, str] | None] = None  # sent with the answer

    def __init__(
        self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details = details or {}


class Unauthorized(AppError):
    status_code = 401
    default_code = "unauthorized"
    headers: ClassVar[dict[str, str] | None] = {"WWW-Authenticate": "Bearer"}


class Forbidden(AppError):
    status_code = 403
    default_code = "forbidden"


class NotFound(AppError):
    status_code = 404
    default_code = "not_found"


class Conflict(AppError):
    status_code = 409
    default_code = "conflict"


class TooLarge(AppError):
    status_code = 413
    default_code = "too_large"


class InvalidInput(AppError):
    status_code = 422
    default_code = "validation_error"


class StorageError(AppError):
    status_code = 500
    default_code = "storage_error"


class ContextFilesDamaged(StorageError):
    """A context's messages.jsonl holds fewer bytes than were committed: acknowledged messages
    are missing. Nothing is served or appended (a seq must never be issued twice) until an
    operator restores the file or accepts the loss."""

    def __init__(self, task_uuid: str, thread_id: int, details: dict[str, Any]) -> None:
        missing = details["missing_seqs"]
        super().__init__(
            f"task {task_uuid} thread {thread_id}: messages.jsonl holds {details['found_bytes']} "
            f"of its {details['committed_bytes']} committed bytes; seqs {missing[0]}..{missing[1]} "
            "are missing. Restore the file from a backup, or accept the loss with "
            f"`context-service repair {task_uuid}"
            + (f" --thread-id {thread_id}`" if thread_id else "`"),
            code="task_files_damaged",
            details={"uuid": task_uuid, "thread_id": thread_id, **details},
        )


class InsufficientStorage(StorageError):
    """A write the disk refused for want of space (files or database): nothing was
    acknowledged, and the same request may succeed once there is room."""

    status_code = 507
    default_code = "insufficient_storage"


class StorageUnavailable(StorageError):
    """A write refused because the store is read-only or not ours to write."""

    status_code = 503
    default_code = "storage_unavailable"


class TaskNotFound(NotFound):
    def __init__(self, task_uuid: str) -> None:
        super().__init__(
            f"task {task_uuid} does not exist", code="task_not_found", details={"uuid": task_uuid}
        )


class TaskNotWritable(Conflict):
    """Only running tasks change; ``doing`` says what was refused ("take messages", ...)."""

    def __init__(self, task_uuid: str, status: str, doing: str) -> None:
        super().__init__(
            f"task {task_uuid} is {status}: only running tasks {doing}",
            code="task_not_writable",
            details={"uuid": task_uuid, "status": status},
        )


class ThreadNotFound(NotFound):
    def __init__(self, task_uuid: str, thread_id: int) -> None:
        super().__init__(
            f"task {task_uuid} has no thread {thread_id}",
            code="thread_not_found",
            details={"uuid": task_uuid, "thread_id": thread_id},
        )


class ThreadNotActive(Conflict):
    """A thread that ended or was aborted takes no more messages, children or compactions."""

    def __init__(self, task_uuid: str, thread_id: int, status: str) -> None:
        super().__init__(
            f"thread {thread_id} of task {task_uuid} is {status}",
            code="thread_not_active",
            details={"uuid": task_uuid, "thread_id": thread_id, "status": status},
        )


class JsonTooDeep(InvalidInput):
    """A JSON input nests arrays and objects deeper than MAX_JSON_DEPTH: refused before any
    work (the serializers that store and render it stop at a few hundred levels)."""

    def __init__(self, where: str, limit: int) -> None:
        super().__init__(
            f"{where} nests arrays and objects more than {limit} levels deep",
            code="json_too_deep",
            details={"where": where, "max_depth": limit},
        )


class TaskMetadataMissing(StorageError):
    """The task's metadata.json is gone. Its tools, request defaults and summary backend are
    kept nowhere else, so it cannot be rebuilt; the task's row and history are intact."""

    LOST: ClassVar[tuple[str, ...]] = ("tools", "request_defaults", "summary_backend", "inherit")

    def __init__(self, task_uuid: str) -> None:
        super().__init__(
            f"the metadata.json of task {task_uuid} is missing: its tool definitions and "
            "request defaults exist nowhere else, so its context cannot be served or extended; "
            "restore the file from a backup of CONTEXT_DIR (nothing was written)",
            code="task_metadata_missing",
            details={"uuid": task_uuid, "file": "metadata.json", "lost": list(self.LOST)},
        )


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = {}


class ErrorResponse(BaseModel):
    """The one error shape of the API."""

    error: ErrorBody


def error_payload(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}
