"""Which counter counts a task, and the costs it gives (one per counter name, made once)."""

from app.tokens.costs import TokenCosts
from app.tokens.counters import TextCounter, counter_for


class TokenCounting:
    def __init__(self, choice: str) -> None:
        self.choice = choice  # the TOKEN_COUNTER setting
        self._costs: dict[str, TokenCosts] = {}

    def counter_name(self, model: str) -> str:
        """The counter a new task on ``model`` gets; stored with the task for good."""
        return counter_for(model, self.choice).name

    def costs(self, counter_name: str) -> TokenCosts:
        """Costs by a stored counter name (an encoding that cannot load: the heuristic)."""
        costs = self._costs.get(counter_name)
        if costs is None:
            costs = self._costs[counter_name] = TokenCosts(counter_for("", counter_name))
        return costs

    def counter(self, counter_name: str) -> TextCounter:
        return self.costs(counter_name).counter
