"""The lifecycle's transition table (app/lifecycle.py), as a pure function."""

import pytest

from app.errors import Conflict
from app.lifecycle import TRANSITIONS, next_status

pytestmark = pytest.mark.database_agnostic  # touches no database


@pytest.mark.parametrize("action", sorted(TRANSITIONS))
@pytest.mark.parametrize("status", ["running", "paused", "completed", "failed"])
def test_transition_table(action: str, status: str) -> None:
    sources, target = TRANSITIONS[action]
    if status in sources:
        assert next_status(action, status) == target
    else:
        with pytest.raises(Conflict) as caught:
            next_status(action, status)
        assert caught.value.code == "invalid_transition"
