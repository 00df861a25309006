"""A parent's protected region (app/threads/protected.py) on real current.jsonl files, and the
shares that regions and a thread's own budget take of the task's (app/budgets/windows.py,
app/budgets/policy.py)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.budgets.policy import Budget, budget_for, default_reserved_output
from app.budgets.windows import protected_shares
from app.context.records import current_line
from app.storage.jsonl import CHUNK
from app.threads.protected import Region, protected_region

Unit = list[bytes]  # current.jsonl lines that go together, in context order


def message(role: str, content: str) -> Unit:
    return [current_line({"role": role, "content": content})]


def calls(*ids: str, answered: int | None = None) -> Unit:
    """An assistant's tool calls and the results of the first ``answered`` (all by default)."""
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            for i in ids
        ],
    }
    results = [
        current_line({"role": "tool", "tool_call_id": i, "content": f"result of {i}"})
        for i in ids[: len(ids) if answered is None else answered]
    ]
    return [current_line(assistant), *results]


def by_size(line: bytes) -> tuple[bytes, int]:
    """The cost used here: a line costs its bytes, sent as it is."""
    return line, len(line)


def size(units: list[Unit]) -> int:
    return sum(len(line) for unit in units for line in unit)


@dataclass
class Current:
    path: Path

    def region(
        self, share: int, *, calls_open: bool = False, end: int | None = None, cost: Any = by_size
    ) -> Region:
        with open(self.path, "rb") as f:
            committed = self.path.stat().st_size if end is None else end
            return protected_region(f, committed, share, cost, calls_open=calls_open)


def written(tmp_path: Path, units: list[Unit]) -> Current:
    path = tmp_path / "current.jsonl"
    path.write_bytes(b"".join(line for unit in units for line in unit))
    return Current(path)


def entries(units: list[Unit]) -> list[tuple[bytes, int]]:
    return [by_size(line) for unit in units for line in unit]


CONVERSATION = [
    message("system", "You are a persona."),
    message("user", "Build me a calculator tool."),
    message("assistant", "I will ask the coding agent."),
    message("user", "Thanks."),
    message("assistant", "Started."),
]


def test_newest_whole_messages_first_in_context_order(tmp_path: Path) -> None:
    current = written(tmp_path, CONVERSATION)
    for kept in range(len(CONVERSATION) + 1):
        tail = CONVERSATION[len(CONVERSATION) - kept :]
        region = current.region(size(tail))
        assert region.entries == entries(tail)
        assert region.tokens == size(tail)
        if kept < len(CONVERSATION):  # a byte more buys nothing: the next is whole or out
            assert current.region(size(tail) + 1).entries == entries(tail)
    assert current.region(10**9).entries == entries(CONVERSATION)


def test_a_share_of_zero_gives_nothing(tmp_path: Path) -> None:
    region = written(tmp_path, CONVERSATION).region(0)
    assert (region.entries, region.tokens) == ([], 0)


def test_an_empty_context_gives_nothing(tmp_path: Path) -> None:
    region = written(tmp_path, []).region(10**6)
    assert (region.entries, region.tokens) == ([], 0)


def test_tool_calls_are_never_split_from_their_results(tmp_path: Path) -> None:
    pair = calls("call_a", "call_b")
    units = [message("user", "Run the tests."), pair, message("assistant", "All green.")]
    current = written(tmp_path, units)
    last = units[-1:]
    # Room for the results and the last message, not for the call: the whole unit stays out.
    for share in range(size(last), size(units[1:])):
        assert current.region(share).entries == entries(last), share
    assert current.region(size(units[1:])).entries == entries(units[1:])


def test_a_unit_whose_calls_are_open_is_left_out(tmp_path: Path) -> None:
    before = [message("user", "Run the tests."), calls("call_a"), message("assistant", "Done.")]
    for waiting in (calls("call_b", "call_c", answered=0), calls("call_b", "call_c", answered=1)):
        current = written(tmp_path, [*before, waiting])
        assert current.region(10**9, calls_open=True).entries == entries(before)
    finished = [*before, calls("call_b", "call_c")]
    current = written(tmp_path, finished)
    assert current.region(10**9, calls_open=False).entries == entries(finished)


def test_it_stops_at_the_first_unit_that_does_not_fit(tmp_path: Path) -> None:
    old, big, new = message("user", "old"), message("assistant", "x" * 500), message("user", "new")
    current = written(tmp_path, [old, big, new])
    region = current.region(size([old, new]))  # room for both small ones, not for the big one
    assert region.entries == entries([new])
    assert region.tokens == size([new])


def test_only_the_committed_part_of_the_file_is_read(tmp_path: Path) -> None:
    """Bytes past the head's current_bytes (a write not yet committed) are not the context."""
    current = written(tmp_path, [*CONVERSATION, message("user", "not committed yet")])
    committed = size(CONVERSATION)
    assert current.region(10**9, end=committed).entries == entries(CONVERSATION)


def test_the_region_holds_lines_as_the_cost_function_sends_them(tmp_path: Path) -> None:
    """The cost function may send a line otherwise (anchors are rendered for the viewer)."""
    rendered = current_line({"role": "system", "content": "[Thread: coder]\n- ID: 1"})

    def render(line: bytes) -> tuple[bytes, int]:
        return (rendered, 400) if b"Started." in line else (line, 1)

    current = written(tmp_path, CONVERSATION)
    region = current.region(402, cost=render)
    assert region.entries == [(CONVERSATION[-3][0], 1), (CONVERSATION[-2][0], 1), (rendered, 400)]
    assert region.tokens == 402


def test_a_region_read_across_chunks_keeps_context_order(tmp_path: Path) -> None:
    """current.jsonl is read backward a chunk at a time; lines cut by a chunk come out whole."""
    units = [
        message("user" if i % 2 else "assistant", f"{i}: " + "y" * (4000 + i))
        for i in range(3 * CHUNK // 4000)
    ]
    units[100:101] = [calls(f"call_{i}", f"call_{i}b") for i in range(30)]
    current = written(tmp_path, units)
    assert size(units) > 2 * CHUNK
    tail = units[len(units) // 3 :]
    assert current.region(size(tail)).entries == entries(tail)
    assert current.region(size(units)).entries == entries(units)


unit_strategy = st.one_of(
    st.builds(message, st.sampled_from(["system", "user", "assistant"]), st.text(max_size=300)),
    st.builds(
        lambda n, k: calls(*(f"c{k}_{i}" for i in range(n))),
        st.integers(1, 3),
        st.integers(0, 10**6),
    ),
)


@given(
    units=st.lists(unit_strategy, max_size=12),
    open_calls=st.one_of(st.none(), st.integers(0, 2)),
    share=st.integers(0, 5000),
)
def test_the_region_is_the_longest_tail_of_whole_units_within_the_share(
    tmp_path_factory: pytest.TempPathFactory,
    units: list[Unit],
    open_calls: int | None,
    share: int,
) -> None:
    waiting = [] if open_calls is None else [calls("open_a", "open_b", answered=open_calls)]
    current = written(tmp_path_factory.mktemp("region"), [*units, *waiting])
    kept = 0
    while kept < len(units) and size(units[len(units) - kept - 1 :]) <= share:
        kept += 1
    tail = units[len(units) - kept :]
    region = current.region(share, calls_open=open_calls is not None)
    assert region.entries == entries(tail)
    assert region.tokens == size(tail) <= share


# Shares of the task's budget ---------------------------------------------------------------


def task_budget(window: int, *, calibration: float = 1.0) -> Budget:
    return budget_for(
        window,
        default_reserved_output(window),
        buffer=0.1,
        condense_threshold=0.7,
        calibration=calibration,
    )


def test_seed_003_s_numbers() -> None:
    """root 100k; stelis_1 80k; stelis_1_1 64k: the parents keep 20k and 16k."""
    assert protected_shares(100_000, [0.8]) == [20_000]
    assert protected_shares(100_000, [0.8, 0.8]) == [20_000, 16_000]
    assert protected_shares(100_000, []) == []
    budget = Budget(window=100_000, reserved_output=0, allowed=100_000, threshold=70_000)
    assert budget.share([0.8]) == Budget(80_000, 0, 80_000, 56_000)
    assert budget.share([0.8, 0.8]) == Budget(64_000, 0, 64_000, 44_800)
    assert budget.share([]) == budget


def test_the_seed_s_tree_on_a_real_budget() -> None:
    """The task of seed 003's tree (100k, 4096 reserved): the numbers the API serves."""
    budget = Budget(window=100_000, reserved_output=4096, allowed=85_904, threshold=70_000)
    assert protected_shares(budget.allowed, [0.8]) == [17_181]
    assert budget.share([0.8]).allowed == 68_723
    assert protected_shares(budget.allowed, [0.8, 0.8]) == [17_181, 13_745]
    assert budget.share([0.8, 0.8]).allowed == 54_978
    assert sum([17_181, 13_745, 54_978]) == budget.allowed


ratios_strategy = st.lists(
    st.floats(min_value=0.0001, max_value=0.9999, allow_nan=False), max_size=16
)


@given(
    window=st.integers(256, 10_000_000),
    calibration=st.floats(min_value=0.5, max_value=4.0),
    ratios=ratios_strategy,
)
def test_shares_and_the_thread_s_own_budget_fit_the_task_s(
    window: int, calibration: float, ratios: list[float]
) -> None:
    budget = task_budget(window, calibration=calibration)
    shares = protected_shares(budget.allowed, ratios)
    own = budget.share(ratios)
    assert len(shares) == len(ratios)
    assert all(share >= 0 for share in shares)
    assert sum(shares) + own.allowed <= budget.allowed
    assert 0 <= own.allowed <= budget.allowed
    assert 0 <= own.threshold <= budget.threshold
    assert 0 <= own.window <= budget.window
    # Each step down takes at most the ratio of the step above (truncated, never rounded up).
    for depth in range(len(ratios)):
        above, below = budget.share(ratios[:depth]), budget.share(ratios[: depth + 1])
        assert below.allowed <= above.allowed * ratios[depth]
        assert below.window <= above.window * ratios[depth]


@given(allowed=st.integers(0, 10**9), ratios=ratios_strategy)
def test_shares_of_any_allowance(allowed: int, ratios: list[float]) -> None:
    budget = Budget(window=allowed, reserved_output=0, allowed=allowed, threshold=allowed)
    shares = protected_shares(allowed, ratios)
    assert all(share >= 0 for share in shares)
    assert sum(shares) + budget.share(ratios).allowed <= allowed


def headed(current: Current, share: int) -> Region:
    with open(current.path, "rb") as f:
        size = current.path.stat().st_size
        return protected_region(f, size, share, by_size, calls_open=False, keep_head=True)


def test_the_head_comes_first_then_the_newest_units(tmp_path: Path) -> None:
    """keep_head: the system prompt and the first request, then the newest units that fit,
    oldest of those first; nothing in between, nothing twice."""
    long_middle = [message("assistant", "x" * 400), message("user", "y" * 400)]
    units = [*CONVERSATION[:2], *long_middle, *CONVERSATION[2:]]
    current = written(tmp_path, units)
    head, tail = units[:2], units[-3:]
    region = headed(current, size(head) + size(tail))
    assert region.entries == entries(head + tail)
    assert region.tokens == size(head) + size(tail)


def test_a_context_that_fits_whole_is_kept_once(tmp_path: Path) -> None:
    current = written(tmp_path, CONVERSATION)
    region = headed(current, 10_000)
    assert region.entries == entries(CONVERSATION)


def test_a_head_that_does_not_fit_keeps_what_fits_of_it(tmp_path: Path) -> None:
    current = written(tmp_path, CONVERSATION)
    system = CONVERSATION[:1]
    region = headed(current, size(system) + 5)  # the request does not fit, nor anything newer
    assert region.entries == entries(system)


def test_a_context_starting_with_an_assistant_has_no_request_in_its_head(tmp_path: Path) -> None:
    units = [message("system", "s"), message("assistant", "a"), message("user", "u")]
    current = written(tmp_path, units)
    region = headed(current, size(units[:1]) + size(units[2:]))
    assert region.entries == entries(units[:1] + units[2:])
