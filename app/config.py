"""Service settings.

Everything comes from environment variables (names are case-insensitive, e.g. ``CONTEXT_DIR``,
``DATABASE_URL``); every field has a default, so the service starts with no configuration at all:
SQLite in ``./contexts`` and a bind on 127.0.0.1:8080.
"""

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MiB = 1024 * 1024

ChatBackendKind = Literal["openai", "ollama", "anthropic"]
# Compaction tiers, cheapest first in the default order: mask old tool results, condense the
# middle into a summary, truncate the oldest half, elide the middle of the largest message.
CompactionTier = Literal["mask", "condense", "truncate", "elide"]
# Names a request may not give to a named backend: "default" is LLM_BACKEND's, "extractive" is
# the embedded summarizer that needs no backend at all.
RESERVED_BACKEND_NAMES = frozenset({"default", "extractive"})
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


class Settings(BaseSettings):
    # hide_input_in_errors: a refused setting may be a secret (an API key); never echo it.
    model_config = SettingsConfigDict(
        extra="ignore", case_sensitive=False, hide_input_in_errors=True
    )

    context_dir: Path = Field(Path("contexts"), description="Root of the per-task directories.")
    database_url: str = Field(
        "", description="SQLAlchemy async URL; empty means SQLite at CONTEXT_DIR/tasks.db."
    )
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)

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

    max_body_bytes: int = Field(32 * MiB, ge=1024, description="Largest accepted request body.")
    max_message_bytes: int = Field(8 * MiB, ge=256, description="Largest single message.")
    max_batch_messages: int = Field(1000, ge=1, description="Most messages in one POST.")
    max_page_bytes: int = Field(
        8 * MiB, ge=1024, description="A history page stops after this many bytes of records."
    )

    # What one client may hold of the server. `context-service serve` passes the connection
    # limits to uvicorn; the JSON depth and the body read time hold however the app is served.
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
    max_connections: int = Field(
        512,
        ge=1,
        description="Connections (or requests in progress) at once; past it new requests get "
        "503 and a close. Keep it below the process's open-file limit.",
    )
    keep_alive_timeout_s: int = Field(
        5, ge=1, description="An idle keep-alive connection is closed after this."
    )

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
    compaction_tiers: Annotated[tuple[CompactionTier, ...], NoDecode] = Field(
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
    keep_recent: int = Field(5, ge=1, description="Messages a condense always keeps at the end.")
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

    token_counter: Literal["auto", "heuristic", "o200k_base", "cl100k_base"] = Field(
        "auto",
        description="auto: exact BPE counts for the model's family (o200k_base unless an older "
        "OpenAI model), the characters/4 heuristic if the encoding cannot be loaded.",
    )
    calibration_min: float = Field(0.5, gt=0, le=1, description="Lowest calibration factor.")
    calibration_max: float = Field(3.0, ge=1, description="Highest calibration factor.")
    calibration_smoothing: float = Field(
        0.3, gt=0, le=1, description="Weight of a lower reported ratio (a higher one is taken)."
    )

    io_threads: int = Field(16, ge=2, description="Threads for blocking file I/O.")

    job_lease_s: float = Field(
        30.0, gt=0, description="A running job not renewed for this long is requeued."
    )
    job_poll_s: float = Field(1.0, gt=0, description="How often the runner looks for due jobs.")
    job_max_attempts: int = Field(3, ge=1)
    job_backoff_s: float = Field(2.0, ge=0, description="Wait before retry n: backoff * 2**(n-1).")
    job_concurrency: int = Field(2, ge=1, description="Jobs one process runs at once.")
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object a line, with the task uuid as a field."
    )

    # Lifecycle: final summaries, inheritance, hooks, cleanup.
    final_summary_backend: str = Field(
        "", description="Named LLM backend for final summaries; empty: the default backend."
    )
    final_summary_max_tokens: int = Field(3000, ge=64, description="Longest final summary.")
    inheritance_enabled: bool = Field(True, description="Default of POST /tasks `inherit`.")
    max_summary_tokens: int = Field(
        4000, ge=100, description="Largest inherited context message (summary + planning)."
    )
    inheritance_wait_s: float = Field(
        5.0, ge=0, description="How long a create waits for a pending final summary to inherit."
    )
    webhooks: dict[str, WebhookConfig] = Field(
        default_factory=dict, description="Named webhooks: JSON object name -> {url, events...}."
    )
    api_keys: Annotated[dict[str, ApiKeyConfig], NoDecode] = Field(
        default_factory=dict,
        description="Agent keys: comma-separated, or a JSON object name -> {key, role, users, "
        "task_sources}. With ADMIN_API_KEYS empty too: no authentication (local use).",
    )
    admin_api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (), description="Admin keys (delete, cleanup, maintenance): comma-separated."
    )
    webhook_timeout_s: float = Field(10.0, gt=0, description="Per delivery attempt.")
    webhook_max_attempts: int = Field(5, ge=1, description="Deliveries tried before giving up.")
    cleanup_days: int = Field(
        30, ge=0, description="Finished tasks older than this are removed; 0: never by itself."
    )
    cleanup_interval_s: float = Field(3600.0, gt=0, description="How often cleanup runs.")

    # A disk that fills up: /readyz, and SQLite's write-ahead log.
    ready_min_free_bytes: int = Field(
        32 * MiB,
        ge=0,
        description="/readyz answers 503 when the disk of CONTEXT_DIR (or of the SQLite "
        "database) has less free space than this.",
    )
    wal_checkpoint_interval_s: float = Field(
        60.0, gt=0, description="How often SQLite's write-ahead log is checkpointed and truncated."
    )

    # Threads, which the original design called "Stelis" (hence these names).
    stelis_max_depth: int = Field(
        3, ge=1, le=16, description="The deepest a thread may be; the root is at depth 0."
    )
    stelis_default_window_ratio: float = Field(
        0.8, gt=0, lt=1, description="Share of its parent's window a new thread gets."
    )

    # LLM backends (app/llm/). "extractive" (the default) needs no network and no chat backend.
    llm_backend: Literal["extractive", "openai", "ollama", "anthropic"] = "extractive"
    llm_base_url: str = Field("", description="Empty: the kind's usual URL (see app/llm/).")
    llm_model: str = ""
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(60.0, gt=0, description="Per attempt, not per call.")
    llm_max_retries: int = Field(2, ge=0, le=10, description="Attempts = 1 + retries.")
    llm_retry_backoff_s: float = Field(
        0.5, ge=0, description="First wait between attempts; doubles each time."
    )
    llm_retry_backoff_max_s: float = Field(8.0, ge=0, description="Longest wait between attempts.")
    llm_window: int = Field(32_768, ge=256, description="The backend model's own context window.")
    llm_backends: dict[str, LLMBackendConfig] = Field(
        default_factory=dict, description="Named backends a request may choose: JSON object."
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

    @field_validator("compaction_tiers", mode="before")
    @classmethod
    def _tier_list(cls, value: Any) -> Any:
        return _comma_list(value) if isinstance(value, str) else value

    @field_validator("compaction_tiers")
    @classmethod
    def _tiers_fit(cls, tiers: tuple[str, ...]) -> tuple[str, ...]:
        return check_tiers(tiers)

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
        secrets = [c.key.get_secret_value() for c in self.auth_keys.values()]
        if any(s != s.strip() for s in secrets):
            raise ValueError("API keys may not start or end with spaces")
        if len(set(secrets)) != len(secrets):
            raise ValueError("the same API key is configured twice")
        return self

    @property
    def auth_keys(self) -> dict[str, ApiKeyConfig]:
        """Every configured key by name: API_KEYS' and ADMIN_API_KEYS' (admin-1, admin-2...)."""
        return self.api_keys | self._admin_keys()

    def _admin_keys(self) -> dict[str, ApiKeyConfig]:
        return {
            f"admin-{i}": ApiKeyConfig(key=key, role="admin")
            for i, key in enumerate(self.admin_api_keys, 1)
        }

    @model_validator(mode="after")
    def _check_llm(self) -> Self:
        if self.llm_backend != "extractive" and not self.llm_model:
            raise ValueError(f"LLM_MODEL must be set when LLM_BACKEND is {self.llm_backend}")
        taken = RESERVED_BACKEND_NAMES.intersection(self.llm_backends)
        if taken:
            raise ValueError(f"LLM_BACKENDS may not use the reserved names {sorted(taken)}")
        for setting, names in (("LLM_BACKENDS", self.llm_backends), ("WEBHOOKS", self.webhooks)):
            bad = [name for name in names if not _BACKEND_NAME.fullmatch(name)]
            if bad:
                raise ValueError(f"{setting} names must match {_BACKEND_NAME.pattern}: {bad}")
        return self

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.context_dir.resolve() / 'tasks.db'}"


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
