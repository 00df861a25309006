"""The service's error tree and its error codes (app/api/errors.py turns them into HTTP answers).

    AppError                      500 internal_error
     ├── Unauthorized             401  (no key, unknown key)
     ├── Forbidden                403  (admin_key_required, key_scope_too_narrow, out_of_scope)
     ├── NotFound                 404  (task_not_found, ...)
     ├── Conflict                 409  (invalid_transition, task_not_writable, ...)
     ├── TooLarge                 413  (body_too_large, message_too_large, context_over_budget)
     ├── UnsupportedMediaType     415  (a body that is not declared as JSON)
     ├── InvalidInput             422  (validation_error, invalid_json, json_too_deep, ...)
     └── StorageError             500  (task_files_damaged, task_metadata_missing, ...)
          ├── InsufficientStorage 507  (the disk of CONTEXT_DIR or the database is full)
          └── StorageUnavailable  503  (CONTEXT_DIR or the database cannot be written)

Every error leaves the service as ``{"error": {"code", "message", "details"}}``.
"""

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel


class ErrorCode(StrEnum):
    """Every ``error.code`` the API answers with, each defined once."""

    ADMIN_KEY_REQUIRED = "admin_key_required"
    AMBIGUOUS_INPUT_FORMAT = "ambiguous_input_format"
    BAD_REQUEST = "bad_request"
    BATCH_TOO_LARGE = "batch_too_large"
    BODY_READ_TIMEOUT = "body_read_timeout"
    BODY_TOO_LARGE = "body_too_large"
    COMPACTION_FAILED = "compaction_failed"
    CONFLICT = "conflict"
    CONTEXT_EMPTY = "context_empty"
    CONTEXT_OVER_BUDGET = "context_over_budget"
    CORRUPT_RECORD = "corrupt_record"
    DUPLICATE_TOOL_CALL_ID = "duplicate_tool_call_id"
    EMPTY = "empty"
    FORBIDDEN = "forbidden"
    HEAD_MISSING = "head_missing"
    HTTP_ERROR = "http_error"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    INSUFFICIENT_STORAGE = "insufficient_storage"
    INTERNAL_ERROR = "internal_error"
    INVALID_CHARACTER = "invalid_character"
    INVALID_CURSOR = "invalid_cursor"
    INVALID_JSON = "invalid_json"
    INVALID_RANGE = "invalid_range"
    INVALID_REWIND_TARGET = "invalid_rewind_target"
    INVALID_TRANSITION = "invalid_transition"
    JOB_NOT_FOUND = "job_not_found"
    JSON_TOO_DEEP = "json_too_deep"
    KEY_SCOPE_TOO_NARROW = "key_scope_too_narrow"
    MESSAGE_NOT_FOUND = "message_not_found"
    MESSAGE_TOO_LARGE = "message_too_large"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NO_ROOM_FOR_CONTEXT = "no_room_for_context"
    NOT_FOUND = "not_found"
    OLDER_THAN_DAYS_REQUIRED = "older_than_days_required"
    OUT_OF_SCOPE = "out_of_scope"
    PROXY_NOT_CONFIGURED = "proxy_not_configured"
    RESERVED_FIELD = "reserved_field"
    STORAGE_CORRUPT = "storage_corrupt"
    STORAGE_ERROR = "storage_error"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    TASK_EXISTS = "task_exists"
    TASK_FILES_DAMAGED = "task_files_damaged"
    TASK_FILES_MISSING = "task_files_missing"
    TASK_METADATA_MISSING = "task_metadata_missing"
    TASK_NOT_FINISHED = "task_not_finished"
    TASK_NOT_FOUND = "task_not_found"
    TASK_NOT_WRITABLE = "task_not_writable"
    TASK_REQUIRED = "task_required"
    THREAD_DEPTH_EXCEEDED = "thread_depth_exceeded"
    THREAD_HAS_ACTIVE_CHILDREN = "thread_has_active_children"
    THREAD_NOT_ACTIVE = "thread_not_active"
    THREAD_NOT_FOUND = "thread_not_found"
    THREAD_WINDOW_TOO_SMALL = "thread_window_too_small"
    TOO_LARGE = "too_large"
    TOOL_RESULTS_PENDING = "tool_results_pending"
    UNAUTHORIZED = "unauthorized"
    UNKNOWN_BACKEND = "unknown_backend"
    UNKNOWN_TOOL_CALL = "unknown_tool_call"
    UNKNOWN_WEBHOOK = "unknown_webhook"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    VALIDATION_ERROR = "validation_error"


class AppError(Exception):
    status_code: ClassVar[int] = 500
    default_code: ClassVar[ErrorCode] = ErrorCode.INTERNAL_ERROR
    headers: ClassVar[dict[str, str] | None] = None  # sent with the answer

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details = details or {}


class Unauthorized(AppError):
    status_code = 401
    default_code = ErrorCode.UNAUTHORIZED
    headers: ClassVar[dict[str, str] | None] = {"WWW-Authenticate": "Bearer"}


class Forbidden(AppError):
    status_code = 403
    default_code = ErrorCode.FORBIDDEN


class NotFound(AppError):
    status_code = 404
    default_code = ErrorCode.NOT_FOUND


class Conflict(AppError):
    status_code = 409
    default_code = ErrorCode.CONFLICT


class TooLarge(AppError):
    status_code = 413
    default_code = ErrorCode.TOO_LARGE


class UnsupportedMediaType(AppError):
    status_code = 415
    default_code = ErrorCode.UNSUPPORTED_MEDIA_TYPE


class InvalidInput(AppError):
    status_code = 422
    default_code = ErrorCode.VALIDATION_ERROR


class RequestInvalid(InvalidInput):
    """Input that does not validate (pydantic's errors, their ``loc`` from the request's top:
    ``body``, ``query``...): the first error in the message, every error in the details."""

    def __init__(
        self,
        errors: Sequence[Mapping[str, Any]],
        *,
        hint: str | None = None,
        code: ErrorCode = ErrorCode.VALIDATION_ERROR,
    ) -> None:
        listed = [{"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]} for e in errors]
        first = listed[0] if listed else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(part) for part in first["loc"])
        message = f"{where}: {first['msg']}" if where else str(first["msg"])
        super().__init__(
            f"{message} ({hint})" if hint else message, code=code, details={"errors": listed}
        )


class InvalidJson(InvalidInput):
    """A body that does not parse as JSON, said where and why."""

    def __init__(self, line: int, column: int, reason: str) -> None:
        super().__init__(
            f"invalid JSON at line {line}, column {column}: {reason}",
            code=ErrorCode.INVALID_JSON,
            details={"line": line, "column": column, "reason": reason},
        )


class BadRequest(AppError):
    status_code = 400
    default_code = ErrorCode.BAD_REQUEST


class Unavailable(AppError):
    """Something the request needs is not there: a wire with no backend configured, an
    upstream LLM that did not answer."""

    status_code = 503
    default_code = ErrorCode.PROXY_NOT_CONFIGURED


class UpstreamUnavailable(AppError):
    """The upstream LLM of a proxied request could not be reached (an answer, even an error,
    is passed through as it came instead)."""

    status_code = 502
    default_code = ErrorCode.UPSTREAM_UNAVAILABLE


class UpstreamTimeout(UpstreamUnavailable):
    """The upstream LLM of a proxied request did not answer in time."""

    status_code = 504
    default_code = ErrorCode.UPSTREAM_TIMEOUT


class StorageError(AppError):
    status_code = 500
    default_code = ErrorCode.STORAGE_ERROR


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
            code=ErrorCode.TASK_FILES_DAMAGED,
            details={"uuid": task_uuid, "thread_id": thread_id, **details},
        )


class InsufficientStorage(StorageError):
    """A write the disk refused for want of space (files or database): nothing was
    acknowledged, and the same request may succeed once there is room."""

    status_code = 507
    default_code = ErrorCode.INSUFFICIENT_STORAGE


class StorageUnavailable(StorageError):
    """A write refused because the store is read-only or not ours to write."""

    status_code = 503
    default_code = ErrorCode.STORAGE_UNAVAILABLE


class TaskNotFound(NotFound):
    def __init__(self, task_uuid: str) -> None:
        super().__init__(
            f"task {task_uuid} does not exist",
            code=ErrorCode.TASK_NOT_FOUND,
            details={"uuid": task_uuid},
        )


class TaskNotWritable(Conflict):
    """Only running tasks change; ``doing`` says what was refused ("take messages", ...)."""

    def __init__(self, task_uuid: str, status: str, doing: str) -> None:
        super().__init__(
            f"task {task_uuid} is {status}: only running tasks {doing}",
            code=ErrorCode.TASK_NOT_WRITABLE,
            details={"uuid": task_uuid, "status": status},
        )


class ThreadNotFound(NotFound):
    def __init__(self, task_uuid: str, thread_id: int) -> None:
        super().__init__(
            f"task {task_uuid} has no thread {thread_id}",
            code=ErrorCode.THREAD_NOT_FOUND,
            details={"uuid": task_uuid, "thread_id": thread_id},
        )


class MessageNotFound(NotFound):
    def __init__(self, task_uuid: str, thread_id: int, seq: int, last_seq: int) -> None:
        super().__init__(
            f"task {task_uuid} thread {thread_id} has no message {seq}: its seqs run from 1 "
            f"to {last_seq}",
            code=ErrorCode.MESSAGE_NOT_FOUND,
            details={"uuid": task_uuid, "thread_id": thread_id, "seq": seq, "last_seq": last_seq},
        )


class ThreadNotActive(Conflict):
    """A thread that ended or was aborted takes no more messages, children or compactions."""

    def __init__(self, task_uuid: str, thread_id: int, status: str) -> None:
        super().__init__(
            f"thread {thread_id} of task {task_uuid} is {status}",
            code=ErrorCode.THREAD_NOT_ACTIVE,
            details={"uuid": task_uuid, "thread_id": thread_id, "status": status},
        )


class JsonTooDeep(InvalidInput):
    """A JSON input nests arrays and objects deeper than MAX_JSON_DEPTH: refused before any
    work (the serializers that store and render it stop at a few hundred levels)."""

    def __init__(self, where: str, limit: int) -> None:
        super().__init__(
            f"{where} nests arrays and objects more than {limit} levels deep",
            code=ErrorCode.JSON_TOO_DEEP,
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
            code=ErrorCode.TASK_METADATA_MISSING,
            details={"uuid": task_uuid, "file": "metadata.json", "lost": list(self.LOST)},
        )


class ErrorBody(BaseModel):
    code: ErrorCode
    message: str
    details: dict[str, Any] = {}


class ErrorResponse(BaseModel):
    """The one error shape of the API."""

    error: ErrorBody


def error_payload(
    code: ErrorCode, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}
