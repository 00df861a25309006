"""The calibration rule: up at once, down smoothed, bounded, implausible reports ignored."""

import pytest

from app.tokens.calibration import (
    CalibrationPolicy,
    reported_output_tokens,
    reported_prompt_tokens,
)

pytestmark = pytest.mark.database_agnostic

POLICY = CalibrationPolicy(low=0.5, high=3.0, smoothing=0.3)


def test_the_first_report_above_sets_the_factor_one_below_moves_it_part_way() -> None:
    assert POLICY.update(1.0, served=1000, reported=1300) == 1.3
    assert POLICY.update(1.0, served=1000, reported=800) == pytest.approx(0.94)


def test_a_higher_ratio_is_taken_at_once_a_lower_one_smoothed() -> None:
    assert POLICY.update(1.1, served=1000, reported=1500) == 1.5
    assert POLICY.update(1.5, served=1000, reported=1000) == pytest.approx(1.35)


def test_the_factor_stays_within_bounds() -> None:
    assert POLICY.update(1.0, served=1000, reported=3900) == 3.0
    assert POLICY.update(0.55, served=1000, reported=260) == 0.5


@pytest.mark.parametrize(("served", "reported"), [(1000, 5000), (1000, 100), (0, 10), (10, 0)])
def test_implausible_reports_are_no_evidence(served: int, reported: int) -> None:
    assert POLICY.update(1.2, served=served, reported=reported) is None


def test_usage_in_each_providers_terms() -> None:
    assert reported_prompt_tokens({"prompt_tokens": 10, "completion_tokens": 2}) == 10
    anthropic = {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 7}
    assert reported_prompt_tokens(anthropic) == 105
    assert reported_output_tokens(anthropic) == 7
    assert reported_prompt_tokens({"prompt_eval_count": 42, "eval_count": 3}) == 42
    assert reported_output_tokens({"prompt_eval_count": 42, "eval_count": 3}) == 3
    assert reported_prompt_tokens({"completion_tokens": 3}) is None
