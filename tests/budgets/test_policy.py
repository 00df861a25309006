"""The budget (SPEC §6) and the condense thresholds (seed 002), as pure functions."""

import pytest

from app.budgets.policy import budget_for, default_reserved_output, effective_threshold

pytestmark = pytest.mark.database_agnostic


def test_budget_defaults() -> None:
    assert default_reserved_output(128_000) == 8192
    assert default_reserved_output(8_000) == 1600
    budget = budget_for(128_000, 4096, buffer=0.1, condense_threshold=0.7)
    assert budget.allowed == 115_200 - 4096
    assert budget.threshold == 89_600
    assert budget.next_action(0) == "none"
    assert budget.next_action(89_600) == "condense"
    assert budget.next_action(budget.allowed + 1) == "over_budget"


@pytest.mark.parametrize(
    ("profile", "expected"),
    [(None, 0.7), (-1, 0.7), (0.5, 0.5), (1.0, 1.0), (0.05, 0.05), (1.5, 0.7), (0.0, 0.7)],
)
def test_profile_thresholds_follow_seed_002(profile: float | None, expected: float) -> None:
    assert effective_threshold(0.7, profile, "m") == expected


def test_an_invalid_profile_threshold_warns(caplog: pytest.LogCaptureFixture) -> None:
    assert effective_threshold(0.7, 7, "gpt-x") == 0.7
    assert "invalid condense threshold 7 for profile 'gpt-x'" in caplog.text


def test_absolute_token_threshold_replaces_the_share() -> None:
    budget = budget_for(100_000, 8192, buffer=0.1, condense_threshold=0.7, token_threshold=8000)
    assert budget.threshold == 8000
    assert budget.allowed == 90_000 - 8192
