"""Settings the tests run the app with: fast (no fsync, quick job polling, characters / 4
tokens), and with the fake LLM server as the backend; a test's own values layered over them."""

import os
from pathlib import Path
from typing import Any

from app.config import Settings
from tests.fakes.llm_server import FakeLLM

# The apps the tests run in their own process digest a condense's span in a worker thread:
# with the default pool, each app that condenses started a process (about a second of CPU, and
# the condense waited for it), and the tests make hundreds. conftest sets these variables for
# the test process; the service processes the tests start (tests/support/server.py) do not
# inherit them, and run the default pool, as do the tests that give the pool a size.
IN_PROCESS_ENV = {"SUMMARIZER_PROCESSES": "0"}


def service_env() -> dict[str, str]:
    """The environment of a service process a test starts: the test's own (DATABASE_URL names
    its database, see conftest), less what only the test process's apps run with."""
    return {k: v for k, v in os.environ.items() if k not in IN_PROCESS_ENV}


def layered(*layers: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for Settings, each layer over the ones before; a group given as a dict
    (``job={"poll_s": 0.05}``) is merged field by field, so a test changes only what it names."""
    values: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            below = values.get(name)
            both = isinstance(below, dict) and isinstance(value, dict)
            values[name] = below | value if both else value
    return values


def fast_settings(context_dir: Path, **extra: Any) -> Settings:
    """No fsync, jobs polled and retried every 50 ms, the seed 000 heuristic counter."""
    values: dict[str, Any] = {
        "context_dir": context_dir,
        "storage": {"fsync": "never"},
        "job": {"poll_s": 0.05, "backoff_s": 0.05},
        "token_counter": "heuristic",
    }
    return Settings(**layered(values, extra))


def loop_work_settings(context_dir: Path, *, limit_ms: float = 100.0) -> Settings:
    """No fsync and an INLINE_FILE_WORK_MS far above any small write's or read's time: whether
    work runs on the event loop is the test's choice alone, whatever the disk does meanwhile."""
    return Settings(
        context_dir=context_dir, storage={"fsync": "never", "inline_file_work_ms": limit_ms}
    )


def llm_settings(context_dir: Path, fake: FakeLLM, kind: str = "openai", **extra: Any) -> Settings:
    """Fast settings with the fake LLM server as the default backend (of ``kind``)."""
    values = {"llm": {"backend": kind, "base_url": fake.base_url, "model": "fake-model"}}
    return fast_settings(context_dir, **layered(values, extra))


# A summariser that fails or hangs ends its job quickly: one call per attempt, two attempts,
# short timeouts for the call and for a condense a request waits for.
IMPATIENT: dict[str, Any] = {
    "llm": {"timeout_s": 2.0, "max_retries": 0, "retry_backoff_s": 0.01},
    "job": {"max_attempts": 2},
    "compaction": {"request_condense_timeout_s": 1.0},
}


def impatient_llm_settings(
    context_dir: Path, fake: FakeLLM, kind: str = "openai", **extra: Any
) -> Settings:
    """``llm_settings`` with the IMPATIENT timeouts and attempts (``extra`` over them)."""
    return llm_settings(context_dir, fake, kind, **layered(IMPATIENT, extra))
