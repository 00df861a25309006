"""Service settings.

Everything comes from environment variables (names are case-insensitive, e.g. ``CONTEXT_DIR``,
``DATABASE_URL``); every field has a default, so the service starts with no configuration at all:
SQLite in ``./contexts`` and a bind on 127.0.0.1:8080.
"""

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    context_dir: Path = Field(Path("contexts"), description="Root of the per-task directories.")
    database_url: str = Field(
        "", description="SQLAlchemy async URL; empty means SQLite at CONTEXT_DIR/tasks.db."
    )
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)

    # fsync "always": an acknowledged write survives power loss; "never": only a process crash.
    fsync: Literal["always", "never"] = "always"

    max_body_bytes: int = Field(32 * MiB, ge=1024, description="Largest accepted request body.")
    max_message_bytes: int = Field(8 * MiB, ge=256, description="Largest single message.")
    max_batch_messages: int = Field(1000, ge=1, description="Most messages in one POST.")
    max_page_bytes: int = Field(
        8 * MiB, ge=1024, description="A history page stops after this many bytes of records."
    )

    default_context_length: int = Field(128_000, ge=1024)
    context_buffer: float = Field(0.1, ge=0, lt=1, description="Share of the window kept free.")
    condense_threshold: float = Field(0.7, gt=0, le=1)

    io_threads: int = Field(16, ge=2, description="Threads for blocking file I/O.")
    log_level: str = "INFO"

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.context_dir.resolve() / 'tasks.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")
