"""Settings from the environment: nested GROUP__FIELD names, the flat names beneath them, and
errors that name the variable to mend."""

import json
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.budgets.windows import MIN_WINDOW
from app.config import GROUPS, LEGACY_ENV, Settings

pytestmark = pytest.mark.database_agnostic  # touches no database

AGENT_KEY = "agent-key-0123456789"

# One field per group, set through the environment: (flat name, raw value, what it reads as).
CASES: list[tuple[str, str, Any]] = [
    ("PORT", "9090", 9090),
    ("MAX_BODY_BYTES", "2048", 2048),
    ("FSYNC", "never", "never"),
    ("COMPACTION_TIERS", "truncate, elide", ("truncate", "elide")),
    ("SUMMARIZER_PROCESSES", "0", 0),
    ("CALIBRATION_MAX", "2.5", 2.5),
    ("JOB_LEASE_S", "7", 7.0),
    ("LOG_FORMAT", "json", "json"),
    ("FINAL_SUMMARY_MAX_TOKENS", "500", 500),
    ("INHERITANCE_ENABLED", "false", False),
    ("WEBHOOKS", json.dumps({"ci": {"url": "http://127.0.0.1:9/hook"}}), ["ci"]),
    ("CLEANUP_DAYS", "0", 0),
    ("API_KEYS", AGENT_KEY, ["agent-1"]),  # a comma-separated list, not JSON
    ("STELIS_MAX_DEPTH", "5", 5),
    ("LLM_TIMEOUT_S", "12.5", 12.5),
    ("PROXY_OPENAI_BACKEND", "gpt", "gpt"),
]
# What a case's value needs set beside it to be valid.
NEEDS: dict[str, dict[str, str]] = {
    "PROXY_OPENAI_BACKEND": {
        "LLM_BACKENDS": json.dumps({"gpt": {"kind": "openai", "model": "gpt-4o"}})
    },
}


def nested(flat: str) -> str:
    group, field = LEGACY_ENV[flat]
    return f"{group}__{field}".upper()


def read(settings: Settings, flat: str) -> Any:
    group, field = LEGACY_ENV[flat]
    value = getattr(getattr(settings, group), field)
    return sorted(value) if isinstance(value, dict) else value  # named entries: their names


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting of this machine's environment leaks into these tests."""
    for flat in LEGACY_ENV:
        monkeypatch.delenv(flat, raising=False)
        monkeypatch.delenv(nested(flat), raising=False)


def test_the_cases_cover_every_group() -> None:
    assert {LEGACY_ENV[flat][0] for flat, _, _ in CASES} == GROUPS


def test_every_grouped_field_has_one_flat_name_and_every_flat_name_a_field() -> None:
    targets = list(LEGACY_ENV.values())
    assert len(set(targets)) == len(targets)
    grouped = {
        (group, field)
        for group in GROUPS
        for field in type(getattr(Settings(), group)).model_fields  # the group's own class
    }
    assert set(targets) == grouped
    assert set(Settings.model_fields) - GROUPS == {"context_dir", "database_url", "token_counter"}


@pytest.mark.parametrize(("flat", "raw", "expected"), CASES)
def test_the_flat_name_still_works(
    flat: str, raw: str, expected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(flat, raw)
    for name, value in NEEDS.get(flat, {}).items():
        monkeypatch.setenv(name, value)
    assert read(Settings(), flat) == expected


@pytest.mark.parametrize(("flat", "raw", "expected"), CASES)
def test_the_nested_name_works(
    flat: str, raw: str, expected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(nested(flat), raw)
    for name, value in NEEDS.get(flat, {}).items():
        monkeypatch.setenv(name, value)
    assert read(Settings(), flat) == expected


def test_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("llm__timeout_s", "3")
    monkeypatch.setenv("stelis_default_window_ratio", "0.5")
    settings = Settings()
    assert (settings.llm.timeout_s, settings.threads.default_window_ratio) == (3.0, 0.5)


def test_a_variable_a_group_does_not_know_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """GROUP__NAME with a name no field has is another program's: startup goes on."""
    monkeypatch.setenv("COMPACTION__NOT_OURS", "1")
    monkeypatch.setenv("LOG__COLOR", "yes")
    monkeypatch.setenv("COMPACTION__KEEP_TOOL_RESULTS", "5")
    assert Settings().compaction.keep_tool_results == 5
    with pytest.raises(ValidationError):  # in code, a misspelt field is a mistake
        Settings(compaction={"keep_tool_result": 5})


def test_the_nested_name_wins_over_the_flat_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_TIMEOUT_S", "5")
    monkeypatch.setenv("LLM__TIMEOUT_S", "7")
    monkeypatch.setenv("LLM_MAX_RETRIES", "4")  # a field of the same group named only flat
    settings = Settings()
    assert (settings.llm.timeout_s, settings.llm.max_retries) == (7.0, 4)


def test_arguments_win_over_the_environment_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM__TIMEOUT_S", "7")
    monkeypatch.setenv("LLM_MODEL", "from-the-environment")
    settings = Settings(llm={"timeout_s": 9})
    assert (settings.llm.timeout_s, settings.llm.model) == (9.0, "from-the-environment")


def test_a_variable_named_like_a_group_alone_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only GROUP__FIELD names reach a group: a LOG or SERVER set for something else is left."""
    monkeypatch.setenv("LOG", "/var/log/elsewhere")
    monkeypatch.setenv("SERVER", "prod-1")
    assert Settings().log.level == "INFO"


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("LLM_TIMEOUT_S", "soon"),
        ("LLM__TIMEOUT_S", "soon"),
        ("STELIS_MAX_DEPTH", "99"),
        ("THREADS__MAX_DEPTH", "99"),
        ("FSYNC", "sometimes"),
        ("PORT", "0"),
        ("COMPACTION__SUMMARIZER_PROCESSES", "-1"),
        ("SUMMARIZER_NICENESS", "20"),
    ],
)
def test_a_bad_value_names_its_variable(
    name: str, raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValidationError) as refused:
        Settings()
    [error] = refused.value.errors()
    assert error["loc"] == (name,)
    assert str(refused.value).splitlines()[1] == name


def test_a_bad_entry_is_located_under_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "short-secret"
    monkeypatch.setenv("API_KEYS", json.dumps({"ci": {"key": secret}}))
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert refused.value.errors()[0]["loc"] == ("API_KEYS", "ci", "key")
    assert secret not in str(refused.value)


def test_bad_json_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOKS", "{not json")
    with pytest.raises(SettingsError, match="WEBHOOKS is not valid JSON"):
        Settings()


def test_a_bad_argument_keeps_its_location(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set in code, the value is located by its field, even with the variable set too."""
    monkeypatch.setenv("LLM_TIMEOUT_S", "5")
    with pytest.raises(ValidationError) as refused:
        Settings(llm={"timeout_s": -1})
    assert refused.value.errors()[0]["loc"] == ("llm", "timeout_s")


def test_a_bad_variable_is_named_beside_arguments_of_its_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM_MAX_RETRIES", "many")
    with pytest.raises(ValidationError) as refused:
        Settings(llm={"timeout_s": 9})
    assert refused.value.errors()[0]["loc"] == ("LLM_MAX_RETRIES",)


def test_the_default_window_may_be_as_small_as_any_context_and_no_smaller() -> None:
    assert Settings(compaction={"default_context_length": MIN_WINDOW})
    with pytest.raises(ValidationError) as refused:
        Settings(compaction={"default_context_length": MIN_WINDOW - 1})
    assert refused.value.errors()[0]["loc"] == ("compaction", "default_context_length")


@pytest.mark.parametrize("values", [{"llm_timeout_s": 1}, {"llm": {"timout_s": 1}}])
def test_flat_or_unknown_arguments_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Settings(**values)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PROXY__OPENAI_BACKEND": "nowhere"}, "'nowhere'"),
        (
            {"PROXY__ANTHROPIC_BACKEND": "default", "LLM_BACKEND": "openai", "LLM_MODEL": "m"},
            "kind anthropic",
        ),
    ],
)
def test_a_proxy_backend_must_be_configured_and_of_its_wire_kind(
    env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=named):
        Settings()
