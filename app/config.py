"""Service settings.

Everything comes from environment variables (names are case-insensitive, e.g. ``CONTEXT_DIR``,
``DATABASE_URL``); every field has a default, so the service starts with no configuration at all:
SQLite in ``./contexts`` and a bind on 127.0.0.1:8080.

Most settings sit in groups (``settings.llm.timeout_s``), set as GROUP__FIELD (``LLM__TIMEOUT_S``)
or by the flat name in ``LEGACY_ENV`` (``LLM_TIMEOUT_S``); when both are set, GROUP__FIELD wins.
A bad value is reported under the variable it came from.
"""

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

MiB = 1024 * 1024

ChatBackendKind = Literal["openai", "ollama", "anthropic"]
# Compaction tiers, cheapest first in the default order: mask old tool results, condense the
# middle into a summary, truncate the oldest half, elide the middle of the largest message.
CompactionTier = Literal["mask", "condense", "truncate", "elide"]
EXTRACTIVE = "extractive"  # the summariser that needs no LLM: a backend name like any other
DEFAULT_BACKEND = "default"  # the LLM_* settings' backend, when LLM_BACKEND names one
# Names a request may not give to a named backend: "default" is LLM_BACKEND's, "extractive" is
# the embedded summarizer that needs no backend at all.
RESERVED_BACKEND_NAMES = frozenset({DEFAULT_BACKEND, EXTRACTIVE})
_BACKEND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_tiers(tiers: tuple[str, ...]) -> tuple[str, ...]:
    """Each tier once, and elide among them: the last resort is what makes every context fit."""
    if len(set(tiers)) != len(tiers):
        raise ValueError(f"each compaction tier may appear once: {list(tiers)}")
    if "elide" not in tiers:
        raise ValueError("the compaction tiers must include elide, the one that always fits")
    return tiers


class LLMBackendConfig(BaseModel):
    """One named chat backend in ``LLM_BACKENDS`` (a JSON object: name -> this).

    Unset ``timeout_s``, ``max_retries`` and ``window`` take the global ``LLM_TIMEOUT_S``,
    ``LLM_MAX_RETRIES`` and ``LLM_WINDOW``; an empty ``base_url`` takes the kind's usual one.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ChatBackendKind
    base_url: str = ""
    model: str = Field(min_length=1)
    api_key: SecretStr | None = None
    timeout_s: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0, le=10)
    window: int | None = Field(None, ge=256)


WebhookEvent = Literal["completed", "stopped", "failed"]


class WebhookConfig(BaseModel):
    """One named hook in ``WEBHOOKS`` (a JSON object: name -> this).

    ``all_tasks`` hooks fire for every task; the others only for tasks that name them in
    ``hooks`` at creation. With a ``secret``, each delivery is signed (``X-Context-Signature``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://")
    events: tuple[WebhookEvent, ...] = ("completed", "stopped", "failed")
    all_tasks: bool = False
    secret: SecretStr | None = None


KeyRole = Literal["agent", "admin"]


class ApiKeyConfig(BaseModel):
    """One named key in ``API_KEYS`` (a JSON object: name -> this).

    Agent keys do everything but delete tasks and run maintenance (admin keys). ``users`` and
    ``task_sources`` limit a key to those tenants' tasks (both: both must match).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    key: SecretStr = Field(min_length=16)
    role: KeyRole = "agent"
    users: tuple[str, ...] | None = None
    task_sources: tuple[str, ...] | None = None


class _Group(BaseModel):
    """A group of settings, nested in Settings (``settings.llm.timeout_s``): set in the
    environment as GROUP__FIELD (``LLM__TIMEOUT_S``) or by its flat name (``LEGACY_ENV``)."""

    # hide_input_in_errors: a refused setting may be a secret (an API key); never echo it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class ServerSettings(_Group):
    """Where `context-service serve` binds, and the connection limits it passes to uvicorn."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_connections: int = Field(
        512,
        ge=1,
        description="Connections (or requests in progress) at once; past it new requests get "
        "503 and a close. Keep it below the process's open-file limit.",
    )
    keep_alive_timeout_s: int = Field(
        5, ge=1, description="An idle keep-alive connection is closed after this."
    )
    switch_interval_ms: float = Field(
        0.5,
        gt=0,
        le=100,
        description="How long a thread of the service runs Python before one waiting for the "
        "interpreter gets it (Python's default: 5). Short, so that a request's hand-offs to "
        "worker threads do not wait behind a compaction's work in another thread.",
    )
    gc_freeze: bool = Field(
        True,
        description="Once started, keep what startup made (modules, models, routes) out of the "
        "garbage collector's full passes, which otherwise walk all of it and hold every "
        "request meanwhile. Given back at shutdown; neither done nor undone when something "
        "else in the process had frozen objects first.",
    )


class LimitSettings(_Group):
    """What one client may hold of the server. The JSON depth and the body read time hold
    however the app is served."""

    max_body_bytes: int = Field(32 * MiB, ge=1024, description="Largest accepted request body.")
    max_message_bytes: int = Field(8 * MiB, ge=256, description="Largest single message.")
    max_batch_messages: int = Field(1000, ge=1, description="Most messages in one POST.")
    max_page_bytes: int = Field(
        8 * MiB, ge=1024, description="A history page stops after this many bytes of records."
    )
    max_json_depth: int = Field(
        64,
        ge=2,
        le=200,  # what is stored nests a few levels deeper; its serializers stop near 255
        description="Deepest nesting of arrays and objects in a JSON body; deeper: 422.",
    )
    body_read_timeout_s: float = Field(
        60.0, gt=0, description="A body not whole this long after its headers: 408, closed."
    )
    # Closing on a body still arriving makes the kernel reset the connection, and a client
    # still sending then sees the reset, not the 413: a refused body is drained first, bounded.
    max_discard_bytes: int = Field(
        128 * MiB,
        ge=0,
        description="A body over MAX_BODY_BYTES but not over this is read to its end and dropped "
        "before its 413; a larger one gets the 413 and a close at once.",
    )
    body_discard_timeout_s: float = Field(
        10.0, gt=0, description="Longest drain of a refused body; then its 413 and a close."
    )


class StorageSettings(_Group):
    """Durability, file I/O, and a disk that fills up: /readyz, and SQLite's write-ahead log."""

    # fsync "always": an acknowledged write survives power loss; "never": only a process crash.
    fsync: Literal["always", "never"] = "always"
    head_flush_ms: int = Field(
        100,
        ge=0,
        le=10_000,
        description="An append is committed by its fsynced line in messages.jsonl; the "
        "database's head and the task's counters follow in batches this often (and before a "
        "read of the task). 0: in the append's own transaction.",
    )
    io_threads: int = Field(16, ge=2, description="Threads for blocking file I/O.")
    inline_file_work_ms: float = Field(
        1.0,
        ge=0,
        le=100,
        description="An append of small messages does its file work (write, fsync), and a "
        "read of a context its blocking part (the row on SQLite, current.jsonl opened and "
        "checked for a payload), on the event loop while its waits there (for the disk; not "
        "its own CPU, nor a wait for a CPU) come to at most this long on average (a read "
        "there waits for no lock, or goes to a worker thread), and in a worker thread for a "
        "while after they came to more (a slow or shared disk). 0: always in a worker thread.",
    )
    ready_min_free_bytes: int = Field(
        32 * MiB,
        ge=0,
        description="/readyz answers 503 when the disk of CONTEXT_DIR (or of the SQLite "
        "database) has less free space than this.",
    )
    wal_checkpoint_interval_s: float = Field(
        60.0, gt=0, description="How often SQLite's write-ahead log is checkpointed and truncated."
    )


class CompactionSettings(_Group):
    """Windows, thresholds and the compaction tiers."""

    # The least is budgets' MIN_WINDOW (a test holds them equal); importing it here would make
    # the settings, which every package reads, depend on one of those packages.
    default_context_length: int = Field(128_000, ge=1024)
    context_buffer: float = Field(0.1, ge=0, lt=1, description="Share of the window kept free.")
    condense_threshold: float = Field(0.7, gt=0, le=1)
    condense_profile_thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="Per model: its threshold share; -1 inherits; out of range falls back.",
    )
    token_threshold: int | None = Field(
        None, ge=1, description="An absolute threshold in tokens instead of the share."
    )
    tiers: Annotated[tuple[CompactionTier, ...], NoDecode] = Field(
        ("mask", "condense", "truncate", "elide"),
        description="The compaction tiers, tried in this order (a task may choose its own).",
    )
    keep_tool_results: int = Field(
        3, ge=0, description="Newest tool results per context that masking leaves as they are."
    )
    mask_min_tokens: int = Field(
        1000, ge=1, description="Masking runs only when it frees at least this many tokens."
    )
    min_gain_share: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="A mask, condense or truncation that would free less than this share of the "
        "context is skipped for the next tier (no compaction loops).",
    )
    relief_share: float = Field(
        0.4,
        gt=0,
        le=1,
        description="A background compaction goes on (masking, then condensing) until the "
        "context is under this share of its threshold: room for several turns before the next "
        "one, so the prompt's prefix (the provider's cache) is not broken turn after turn.",
    )
    max_message_share: float = Field(
        0.1,
        gt=0,
        le=1,
        description="The most of the context's budget one message may take: a larger one is cut "
        "in the middle as soon as it is appended (at the end of the payload, where the cut costs "
        "the prompt cache nothing), and an elision cuts a message at least down to it.",
    )
    keep_recent: int = Field(
        5,
        ge=1,
        description="Messages a condense keeps at the end: fewer when they would keep the "
        "context over relief_share of its threshold (at least the newest).",
    )
    min_to_compress: int = Field(5, ge=1, description="Fewer messages than this: no condense.")
    condense_prompt: str = Field(
        "",
        description="Summary prompt; empty or blanks: Roo Code's six-section prompt. With "
        "{messages}: the messages go there, one '[ROLE]: content' each.",
    )
    condense_backend: str = Field(
        "", description="Named LLM backend for condensing; empty: the default backend."
    )
    summary_max_tokens: int = Field(2000, ge=64, description="Longest summary asked for.")
    summary_max_share: float = Field(
        0.25,
        gt=0,
        le=0.9,
        description="Share of the context's budget a condense summary may cost, whatever the "
        "summariser: the digest is sized to it, a chat backend asked for at most it (and cut).",
    )
    request_condense_timeout_s: float = Field(
        20.0, gt=0, description="How long GET /request waits for a condense before truncating."
    )
    summarizer_processes: int = Field(
        1,
        ge=0,
        description="Processes that compute a condense's extractive digest, started at the "
        "first, and once up also index the context and render its new current.jsonl; 0: a "
        "worker thread of the service's process (appends meanwhile wait for the interpreter).",
    )
    summarizer_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="Added to the service's niceness in its summariser processes: the "
        "scheduler gives the service's requests the CPU before a digest.",
    )

    @field_validator("tiers", mode="before")
    @classmethod
    def _tier_list(cls, value: Any) -> Any:
        return _comma_list(value) if isinstance(value, str) else value

    @field_validator("tiers")
    @classmethod
    def _tiers_fit(cls, tiers: tuple[str, ...]) -> tuple[str, ...]:
        return check_tiers(tiers)


class CalibrationSettings(_Group):
    """Bounds of the calibration factor (counted tokens to the provider's reported ones)."""

    min: float = Field(0.5, gt=0, le=1, description="Lowest calibration factor.")
    max: float = Field(3.0, ge=1, description="Highest calibration factor.")
    smoothing: float = Field(
        0.3, gt=0, le=1, description="Weight of a lower reported ratio (a higher one is taken)."
    )


class JobSettings(_Group):
    """The background job runner."""

    lease_s: float = Field(
        30.0, gt=0, description="A running job not renewed for this long is requeued."
    )
    poll_s: float = Field(1.0, gt=0, description="How often the runner looks for due jobs.")
    max_attempts: int = Field(3, ge=1)
    backoff_s: float = Field(2.0, ge=0, description="Wait before retry n: backoff * 2**(n-1).")
    concurrency: int = Field(2, ge=1, description="Jobs one process runs at once.")


class LogSettings(_Group):
    level: str = "INFO"
    format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object a line, with the task uuid as a field."
    )


# Lifecycle: final summaries, inheritance, hooks, cleanup.


class FinalSummarySettings(_Group):
    backend: str = Field(
        "", description="Named LLM backend for final summaries; empty: the default backend."
    )
    max_tokens: int = Field(3000, ge=64, description="Longest final summary.")


class InheritanceSettings(_Group):
    enabled: bool = Field(True, description="Default of POST /tasks `inherit`.")
    max_summary_tokens: int = Field(
        4000, ge=100, description="Largest inherited context message (summary + planning)."
    )
    wait_s: float = Field(
        5.0, ge=0, description="How long a create waits for a pending final summary to inherit."
    )


class WebhookSettings(_Group):
    hooks: dict[str, WebhookConfig] = Field(
        default_factory=dict, description="Named webhooks: JSON object name -> {url, events...}."
    )
    timeout_s: float = Field(10.0, gt=0, description="Per delivery attempt.")
    max_attempts: int = Field(5, ge=1, description="Deliveries tried before giving up.")

    @field_validator("hooks")
    @classmethod
    def _hook_names(cls, hooks: dict[str, WebhookConfig]) -> dict[str, WebhookConfig]:
        _check_names("WEBHOOKS", hooks)
        return hooks


class CleanupSettings(_Group):
    days: int = Field(
        30, ge=0, description="Finished tasks older than this are removed; 0: never by itself."
    )
    interval_s: float = Field(
        3600.0,
        gt=0,
        description="How often cleanup runs (the first time within a minute of startup).",
    )


class AuthSettings(_Group):
    api_keys: Annotated[dict[str, ApiKeyConfig], NoDecode] = Field(
        default_factory=dict,
        description="Agent keys: comma-separated, or a JSON object name -> {key, role, users, "
        "task_sources}. With ADMIN_API_KEYS empty too: no authentication (local use).",
    )
    admin_api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (), description="Admin keys (delete, cleanup, maintenance): comma-separated."
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _named_keys(cls, value: Any) -> Any:
        """API_KEYS as a comma-separated list (agent keys, named agent-1, agent-2...) or JSON."""
        if not isinstance(value, str):
            return value
        value = value.strip()
        if value.startswith("{"):
            return json.loads(value, object_pairs_hook=_unique_names)
        return {f"agent-{i}": {"key": k} for i, k in enumerate(_comma_list(value), 1)}

    @field_validator("admin_api_keys", mode="before")
    @classmethod
    def _key_list(cls, value: Any) -> Any:
        return _comma_list(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_keys(self) -> Self:
        """Refuse keys that could never match, or that two names share (which would win?),
        and names ADMIN_API_KEYS gives its own keys (one of the two keys would be lost)."""
        clash = sorted(set(self.api_keys) & set(self._admin_keys()))
        if clash:
            raise ValueError(
                f"API_KEYS names {clash} are the names ADMIN_API_KEYS gives its keys "
                "(admin-1, admin-2...): rename them, or make them admin keys in API_KEYS"
            )
        if any(len(key.get_secret_value()) < 16 for key in self.admin_api_keys):
            raise ValueError("API keys must have at least 16 characters")
        secrets = [c.key.get_secret_value() for c in self.keys.values()]
        if any(s != s.strip() for s in secrets):
            raise ValueError("API keys may not start or end with spaces")
        if len(set(secrets)) != len(secrets):
            raise ValueError("the same API key is configured twice")
        return self

    @property
    def docs_public(self) -> bool:
        """Without keys the schema and the docs pages are served; with keys nothing but health
        and the index answers without one, so they are not (openapi.yaml documents the API)."""
        return not self.keys

    @property
    def keys(self) -> dict[str, ApiKeyConfig]:
        """Every configured key by name: API_KEYS' and ADMIN_API_KEYS' (admin-1, admin-2...)."""
        return self.api_keys | self._admin_keys()

    def _admin_keys(self) -> dict[str, ApiKeyConfig]:
        return {
            f"admin-{i}": ApiKeyConfig(key=key, role="admin")
            for i, key in enumerate(self.admin_api_keys, 1)
        }


class ThreadSettings(_Group):
    """Threads, which the original design called "Stelis" (hence the flat names STELIS_*)."""

    max_depth: int = Field(
        3, ge=1, le=16, description="The deepest a thread may be; the root is at depth 0."
    )
    default_window_ratio: float = Field(
        0.8, gt=0, lt=1, description="Share of its parent's window a new thread gets."
    )


class LLMSettings(_Group):
    """LLM backends (app/llm/). "extractive" (the default) needs no network and no chat backend."""

    backend: Literal["extractive", "openai", "ollama", "anthropic"] = "extractive"
    base_url: str = Field("", description="Empty: the kind's usual URL (see app/llm/).")
    model: str = ""
    api_key: SecretStr | None = None
    timeout_s: float = Field(60.0, gt=0, description="Per attempt, not per call.")
    max_retries: int = Field(2, ge=0, le=10, description="Attempts = 1 + retries.")
    retry_backoff_s: float = Field(
        0.5, ge=0, description="First wait between attempts; doubles each time."
    )
    retry_backoff_max_s: float = Field(8.0, ge=0, description="Longest wait between attempts.")
    window: int = Field(32_768, ge=256, description="The backend model's own context window.")
    backends: dict[str, LLMBackendConfig] = Field(
        default_factory=dict, description="Named backends a request may choose: JSON object."
    )

    @model_validator(mode="after")
    def _check_llm(self) -> Self:
        if self.backend != EXTRACTIVE and not self.model:
            raise ValueError(f"LLM_MODEL must be set when LLM_BACKEND is {self.backend}")
        taken = RESERVED_BACKEND_NAMES.intersection(self.backends)
        if taken:
            raise ValueError(f"LLM_BACKENDS may not use the reserved names {sorted(taken)}")
        _check_names("LLM_BACKENDS", self.backends)
        return self


class ProxySettings(_Group):
    """The OpenAI and Anthropic wire endpoints (app/proxy/): which configured chat backend each
    forwards to, by name ("default" for LLM_BACKEND, or a name of LLM_BACKENDS). Unset: that
    wire answers 503 ``proxy_not_configured``. A request never brings an upstream URL or key."""

    openai_backend: str = Field(
        "", description="Backend of kind openai that POST /v1/chat/completions forwards to."
    )
    anthropic_backend: str = Field(
        "", description="Backend of kind anthropic that POST /v1/messages forwards to."
    )


# The flat environment names, each read into its group's field. A GROUP__FIELD name wins over
# its flat one when both are set.
LEGACY_ENV: dict[str, tuple[str, str]] = {
    "HOST": ("server", "host"),
    "PORT": ("server", "port"),
    "MAX_CONNECTIONS": ("server", "max_connections"),
    "KEEP_ALIVE_TIMEOUT_S": ("server", "keep_alive_timeout_s"),
    "SWITCH_INTERVAL_MS": ("server", "switch_interval_ms"),
    "GC_FREEZE": ("server", "gc_freeze"),
    "MAX_BODY_BYTES": ("limits", "max_body_bytes"),
    "MAX_MESSAGE_BYTES": ("limits", "max_message_bytes"),
    "MAX_BATCH_MESSAGES": ("limits", "max_batch_messages"),
    "MAX_PAGE_BYTES": ("limits", "max_page_bytes"),
    "MAX_JSON_DEPTH": ("limits", "max_json_depth"),
    "BODY_READ_TIMEOUT_S": ("limits", "body_read_timeout_s"),
    "MAX_DISCARD_BYTES": ("limits", "max_discard_bytes"),
    "BODY_DISCARD_TIMEOUT_S": ("limits", "body_discard_timeout_s"),
    "FSYNC": ("storage", "fsync"),
    "HEAD_FLUSH_MS": ("storage", "head_flush_ms"),
    "IO_THREADS": ("storage", "io_threads"),
    "INLINE_FILE_WORK_MS": ("storage", "inline_file_work_ms"),
    "READY_MIN_FREE_BYTES": ("storage", "ready_min_free_bytes"),
    "WAL_CHECKPOINT_INTERVAL_S": ("storage", "wal_checkpoint_interval_s"),
    "DEFAULT_CONTEXT_LENGTH": ("compaction", "default_context_length"),
    "CONTEXT_BUFFER": ("compaction", "context_buffer"),
    "CONDENSE_THRESHOLD": ("compaction", "condense_threshold"),
    "CONDENSE_PROFILE_THRESHOLDS": ("compaction", "condense_profile_thresholds"),
    "TOKEN_THRESHOLD": ("compaction", "token_threshold"),
    "COMPACTION_TIERS": ("compaction", "tiers"),
    "KEEP_TOOL_RESULTS": ("compaction", "keep_tool_results"),
    "MASK_MIN_TOKENS": ("compaction", "mask_min_tokens"),
    "MIN_GAIN_SHARE": ("compaction", "min_gain_share"),
    "RELIEF_SHARE": ("compaction", "relief_share"),
    "MAX_MESSAGE_SHARE": ("compaction", "max_message_share"),
    "KEEP_RECENT": ("compaction", "keep_recent"),
    "MIN_TO_COMPRESS": ("compaction", "min_to_compress"),
    "CONDENSE_PROMPT": ("compaction", "condense_prompt"),
    "CONDENSE_BACKEND": ("compaction", "condense_backend"),
    "SUMMARY_MAX_TOKENS": ("compaction", "summary_max_tokens"),
    "SUMMARY_MAX_SHARE": ("compaction", "summary_max_share"),
    "REQUEST_CONDENSE_TIMEOUT_S": ("compaction", "request_condense_timeout_s"),
    "SUMMARIZER_PROCESSES": ("compaction", "summarizer_processes"),
    "SUMMARIZER_NICENESS": ("compaction", "summarizer_niceness"),
    "CALIBRATION_MIN": ("calibration", "min"),
    "CALIBRATION_MAX": ("calibration", "max"),
    "CALIBRATION_SMOOTHING": ("calibration", "smoothing"),
    "JOB_LEASE_S": ("job", "lease_s"),
    "JOB_POLL_S": ("job", "poll_s"),
    "JOB_MAX_ATTEMPTS": ("job", "max_attempts"),
    "JOB_BACKOFF_S": ("job", "backoff_s"),
    "JOB_CONCURRENCY": ("job", "concurrency"),
    "LOG_LEVEL": ("log", "level"),
    "LOG_FORMAT": ("log", "format"),
    "FINAL_SUMMARY_BACKEND": ("final_summary", "backend"),
    "FINAL_SUMMARY_MAX_TOKENS": ("final_summary", "max_tokens"),
    "INHERITANCE_ENABLED": ("inheritance", "enabled"),
    "MAX_SUMMARY_TOKENS": ("inheritance", "max_summary_tokens"),
    "INHERITANCE_WAIT_S": ("inheritance", "wait_s"),
    "WEBHOOKS": ("webhook", "hooks"),
    "WEBHOOK_TIMEOUT_S": ("webhook", "timeout_s"),
    "WEBHOOK_MAX_ATTEMPTS": ("webhook", "max_attempts"),
    "CLEANUP_DAYS": ("cleanup", "days"),
    "CLEANUP_INTERVAL_S": ("cleanup", "interval_s"),
    "API_KEYS": ("auth", "api_keys"),
    "ADMIN_API_KEYS": ("auth", "admin_api_keys"),
    "STELIS_MAX_DEPTH": ("threads", "max_depth"),
    "STELIS_DEFAULT_WINDOW_RATIO": ("threads", "default_window_ratio"),
    "LLM_BACKEND": ("llm", "backend"),
    "LLM_BASE_URL": ("llm", "base_url"),
    "LLM_MODEL": ("llm", "model"),
    "LLM_API_KEY": ("llm", "api_key"),
    "LLM_TIMEOUT_S": ("llm", "timeout_s"),
    "LLM_MAX_RETRIES": ("llm", "max_retries"),
    "LLM_RETRY_BACKOFF_S": ("llm", "retry_backoff_s"),
    "LLM_RETRY_BACKOFF_MAX_S": ("llm", "retry_backoff_max_s"),
    "LLM_WINDOW": ("llm", "window"),
    "LLM_BACKENDS": ("llm", "backends"),
    "PROXY_OPENAI_BACKEND": ("proxy", "openai_backend"),
    "PROXY_ANTHROPIC_BACKEND": ("proxy", "anthropic_backend"),
}
GROUPS = frozenset(group for group, _ in LEGACY_ENV.values())


class Settings(BaseSettings):
    """Top-level settings, and the groups. In the environment a group's field is GROUP__FIELD
    (``LLM__TIMEOUT_S``) or its flat name in ``LEGACY_ENV`` (``LLM_TIMEOUT_S``)."""

    # hide_input_in_errors: a refused setting may be a secret (an API key); never echo it.
    model_config = SettingsConfigDict(
        extra="forbid",
        case_sensitive=False,
        env_nested_delimiter="__",
        hide_input_in_errors=True,
    )

    context_dir: Path = Field(Path("contexts"), description="Root of the per-task directories.")
    database_url: str = Field(
        "", description="SQLAlchemy async URL; empty means SQLite at CONTEXT_DIR/tasks.db."
    )
    token_counter: Literal["auto", "heuristic", "o200k_base", "cl100k_base"] = Field(
        "auto",
        description="auto: exact BPE counts for the model's family (o200k_base unless an older "
        "OpenAI model), the characters/4 heuristic if the encoding cannot be loaded.",
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    calibration: CalibrationSettings = Field(default_factory=CalibrationSettings)
    job: JobSettings = Field(default_factory=JobSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    final_summary: FinalSummarySettings = Field(default_factory=FinalSummarySettings)
    inheritance: InheritanceSettings = Field(default_factory=InheritanceSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    cleanup: CleanupSettings = Field(default_factory=CleanupSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    threads: ThreadSettings = Field(default_factory=ThreadSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)

    if not TYPE_CHECKING:  # for mypy, the pydantic plugin's __init__ with the fields' names

        def __init__(self, **values: Any) -> None:
            try:
                super().__init__(**values)
            except ValidationError as error:
                raise _named_by_variable(error, values) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, EnvironmentSource(settings_cls)

    @model_validator(mode="after")
    def _check_proxy_backends(self) -> Self:
        for wire, name in (
            ("openai", self.proxy.openai_backend),
            ("anthropic", self.proxy.anthropic_backend),
        ):
            if name and self.backend_kind(name) != wire:
                raise ValueError(
                    f"PROXY__{wire.upper()}_BACKEND names {name!r}, which is not a configured "
                    f"backend of kind {wire} (LLM_BACKEND as 'default', or an LLM_BACKENDS entry)"
                )
        return self

    def backend_kind(self, name: str) -> str | None:
        """The kind of the configured chat backend ``name``; None when there is none so named."""
        if name == DEFAULT_BACKEND:
            return None if self.llm.backend == EXTRACTIVE else self.llm.backend
        entry = self.llm.backends.get(name)
        return None if entry is None else entry.kind

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.context_dir.resolve() / 'tasks.db'}"


class EnvironmentSource(EnvSettingsSource):
    """The environment: the top-level fields by name, a group's fields as GROUP__FIELD, and
    beneath those the flat names of ``LEGACY_ENV``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # A group is read field by field: a variable named like a group (LOG, SERVER) is not ours.
        value, key, is_complex = super().get_field_value(field, field_name)
        return (None if field_name in GROUPS else value), key, is_complex

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        for group, values in data.items():
            if group in GROUPS and isinstance(values, dict):
                # GROUP__UNKNOWN is another program's variable, not a mistake of ours.
                known = _group_fields(group)
                for key in [key for key in values if key not in known]:
                    del values[key]
        for name, (group, field) in LEGACY_ENV.items():
            value = self.env_vars.get(name.lower())
            if value is None or field in data.get(group, {}):
                continue
            info = _group_fields(group)[field]
            if self.field_is_complex(info):
                try:
                    value = self.decode_complex_value(field, info, value)
                except ValueError as error:
                    raise SettingsError(f"{name} is not valid JSON: {error}") from None
            data.setdefault(group, {})[field] = value
        return data


def _group_fields(group: str) -> dict[str, FieldInfo]:
    model = Settings.model_fields[group].annotation
    assert isinstance(model, type)
    assert issubclass(model, BaseModel)
    return model.model_fields


def _named_by_variable(error: ValidationError, given: dict[str, Any]) -> ValidationError:
    """``error`` with each value that came from the environment located by its variable
    (``LLM_TIMEOUT_S``, not ``llm.timeout_s``): what the operator has to find and mend."""
    present = {name.upper() for name in os.environ}
    renamed = False
    details: list[InitErrorDetails] = []
    for line in error.errors():
        loc = line["loc"]
        if len(loc) >= 2 and loc[0] in GROUPS and not _given(given.get(loc[0]), loc[1]):
            group, field = loc[0], loc[1]
            names = [f"{group}__{field}".upper()]
            names += [name for name, target in LEGACY_ENV.items() if target == (group, field)]
            variable = next((name for name in names if name in present), None)
            if variable is not None:
                loc, renamed = (variable, *loc[2:]), True
        details.append(
            InitErrorDetails(
                type=PydanticCustomError(line["type"], line["msg"]), loc=loc, input=line["input"]
            )
        )
    if not renamed:
        return error
    return ValidationError.from_exception_data(error.title, details, hide_input=True)


def _given(group: Any, field: str | int) -> bool:
    """Whether the arguments set this field of the group (a model given replaces the group)."""
    return isinstance(group, BaseModel) or (isinstance(group, dict) and field in group)


def _check_names(setting: str, names: Iterable[str]) -> None:
    bad = [name for name in names if not _BACKEND_NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"{setting} names must match {_BACKEND_NAME.pattern}: {bad}")


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose names are all different (json.loads keeps the last of a repeated
    name, and a key configured under it would be dropped without a word)."""
    names = [name for name, _ in pairs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"API_KEYS names {repeated} more than once")
    return dict(pairs)


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]
