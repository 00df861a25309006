"""Unit tests of compaction planning (app/compaction/plans.py) on hand-built entry lists.

An entry list is written as a string of role letters: s system, u user, a assistant, t tool
result, c a condense marker (role user), r a truncation marker (role user).
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from app.compaction.plans import (
    MAX_INSTRUCTION_MESSAGES,
    Entry,
    Skip,
    Span,
    elision_order,
    head_length,
    kept_instruction,
    plan_condense,
    plan_truncate,
)

ROLES = {
    "s": "system",
    "u": "user",
    "a": "assistant",
    "t": "tool",
    "c": "user",
    "r": "user",
    "e": "user",
}
MARKERS = {"c": "condense", "r": "truncation", "e": "elision"}
KEEP = 5
MIN = 5


def entries(spec: str, tokens: list[int] | None = None) -> list[Entry]:
    """Entries from role letters; positions and seqs 1, 2, ... (10 tokens each by default)."""
    sizes = tokens or [10] * len(spec)
    return [
        Entry(position=i + 1, seq=i + 1, role=ROLES[ch], tokens=sizes[i], marker=MARKERS.get(ch))
        for i, ch in enumerate(spec)
    ]


def condense(spec: str) -> Span | Skip:
    return plan_condense(entries(spec), keep_recent=KEEP, min_to_compress=MIN)


def assert_pair_safe(items: list[Entry], span: Span) -> None:
    """The span neither starts on a tool result nor ends right before one."""
    assert span.start < span.end
    assert items[span.start].role != "tool"
    assert span.end == len(items) or items[span.end].role != "tool"


def test_head_is_leading_system_messages_and_the_first_other_message() -> None:
    """The head: every leading system message plus the task instruction after them."""
    assert head_length(entries("suauaua")) == 2
    assert head_length(entries("ssuaua")) == 3
    assert head_length(entries("uaua")) == 1
    assert head_length(entries("ss")) == 2
    assert head_length([]) == 0
    # Every user message before the first reply (a demonstration, then the task), but not a
    # compaction marker after them.
    assert head_length(entries("suuua")) == 4
    assert head_length(entries("suca")) == 2
    assert head_length(entries("suur")) == 3
    # A task statement cut by an elision is still the task statement.
    assert head_length(entries("suea")) == 3
    # At most MAX_INSTRUCTION_MESSAGES of them.
    assert head_length(entries("s" + "u" * 12 + "a")) == 1 + MAX_INSTRUCTION_MESSAGES


def test_the_kept_instruction_is_the_task_statement_after_any_demonstration() -> None:
    items = entries("suuaua")
    assert kept_instruction(items) == items[2]
    assert kept_instruction(entries("sa")) is None


def test_condense_keeps_head_and_last_keep_recent() -> None:
    """With plain text turns the span is everything between the head and the last 5."""
    spec = "su" + "au" * 10  # 22 entries
    span = condense(spec)
    assert span == Span(2, len(spec) - KEEP)
    assert span.hides(entries(spec)) == (3, 17)
    assert span.tokens(entries(spec)) == 10 * 15


def test_condense_with_several_system_messages_keeps_them_all() -> None:
    """Two system messages and the instruction are kept."""
    spec = "ssu" + "au" * 8
    span = condense(spec)
    assert isinstance(span, Span)
    assert span.start == 3
    assert span.end == len(spec) - KEEP


def test_condense_without_system_prompt_keeps_first_message() -> None:
    """No system prompt: the head is the first message alone."""
    spec = "u" + "au" * 8
    span = condense(spec)
    assert span == Span(1, len(spec) - KEEP)


def test_condense_never_ends_right_before_a_tool_result() -> None:
    """The last-5 cut falls between a call and its results: they all stay, with the call."""
    spec = "su" + "au" * 6 + "attt" + "ua"  # len 20; the cut at 15 is a tool result
    items = entries(spec)
    assert items[len(spec) - KEEP].role == "tool"
    span = condense(spec)
    assert isinstance(span, Span)
    assert span.end == spec.index("attt")  # the assistant with calls starts the kept tail
    assert_pair_safe(items, span)


def test_condense_never_starts_on_a_tool_result() -> None:
    """A head ending on an assistant's calls keeps the results out of the span."""
    spec = "sa" + "tt" + "uaua" * 4
    items = entries(spec)
    span = condense(spec)
    assert isinstance(span, Span)
    assert span.start == 4
    assert_pair_safe(items, span)


def test_condense_keeps_whole_tool_groups_in_the_span() -> None:
    """Calls and results inside the span are hidden together."""
    spec = "su" + "att" * 3 + "ua" * 4
    items = entries(spec)
    span = condense(spec)
    assert isinstance(span, Span)
    assert_pair_safe(items, span)
    hidden = spec[span.start : span.end]
    assert hidden.count("a") >= 3
    assert hidden.startswith("att")


def test_condense_too_few_messages() -> None:
    """Fewer than MIN_TO_COMPRESS entries between the head and the last 5: skipped."""
    assert condense("su" + "au" * 4) == Skip("too_few_messages")  # 3 between
    assert condense("su") == Skip("too_few_messages")
    assert condense("") == Skip("too_few_messages")
    assert isinstance(condense("su" + "au" * 5), Span)  # exactly 5 between


def test_condense_too_few_after_pair_adjustment() -> None:
    """Enough entries before the pair adjustment, too few after it."""
    spec = "su" + "uaua" + "atttt" + "u"  # end moves back onto 'a': 4 left to hide
    assert condense(spec) == Skip("too_few_messages")


def test_condense_skips_when_a_condense_is_among_the_kept_recent() -> None:
    """A condense among the last entries means one was done just now: recently_condensed."""
    spec = "suc" + "au" * 2
    assert condense(spec) == Skip("recently_condensed")
    spec = "su" + "au" * 6 + "c" + "au" * 2
    assert condense(spec) == Skip("recently_condensed")


def test_condense_of_an_older_condense_is_allowed() -> None:
    """An older summary, now in the middle, may be condensed again."""
    spec = "suc" + "au" * 8
    span = condense(spec)
    assert isinstance(span, Span)
    assert span.start == 2  # the older summary is the first entry hidden


def test_condense_ignores_truncation_markers_for_recency() -> None:
    """Only a recent condense blocks a condense; a truncation marker does not."""
    spec = "su" + "au" * 6 + "r" + "au" * 2
    assert isinstance(condense(spec), Span)


def test_truncate_hides_half_of_what_follows_the_head() -> None:
    """Seed 002: half of the entries after the head, rounded down to an even count."""
    spec = "su" + "au" * 5  # 10 after the head -> 5 -> 4
    assert plan_truncate(entries(spec)) == Span(2, 6)
    spec = "su" + "au" * 6  # 12 after the head -> 6
    assert plan_truncate(entries(spec)) == Span(2, 8)
    spec = "su" + "aua"  # 3 after the head -> 1 -> 0
    assert plan_truncate(entries(spec)) == Skip("nothing_to_truncate")


def test_truncate_counts_are_even_when_no_tool_pair_is_in_the_way() -> None:
    """Without tool results at the edges the hidden count is always even."""
    for n in range(4, 40):
        spec = "su" + ("au" * n)[:n]
        span = plan_truncate(entries(spec))
        assert isinstance(span, Span), n
        assert (span.end - span.start) % 2 == 0, n
        assert span.end - span.start == (n // 2) - (n // 2) % 2, n


def test_truncate_keeps_tool_pairs_together() -> None:
    """A truncation cut landing inside a tool group moves back before the assistant's calls."""
    spec = "su" + "au" + "atttt" + "u" + "au" * 2  # 12 after head -> 6: cut on a tool
    items = entries(spec)
    span = plan_truncate(items)
    assert isinstance(span, Span)
    assert_pair_safe(items, span)
    assert span == Span(2, 4)


def test_truncate_takes_the_results_along_rather_than_hide_only_a_marker() -> None:
    """When moving the cut back before a call would leave only the old marker, the call and
    its results are hidden with it instead (hiding a marker behind a marker gains nothing)."""
    spec = "u" + "r" + "at" + "at" + "a"  # half of 6 is 2: [r, a] would split a pair
    items = entries(spec)
    span = plan_truncate(items)
    assert span == Span(1, 4)  # r, a, t
    assert_pair_safe(items, span)


def test_truncate_never_takes_results_along_to_the_very_end() -> None:
    """Extending over results that run to the end would leave nothing: skipped instead."""
    assert plan_truncate(entries("ur" + "attt")) == Skip("nothing_to_truncate")


def test_truncate_nothing_left_after_pair_adjustment() -> None:
    """When the only candidates are one assistant's calls and results: nothing_to_truncate."""
    spec = "su" + "a" + "ttttt"
    assert plan_truncate(entries(spec)) == Skip("nothing_to_truncate")


def test_truncate_of_short_contexts() -> None:
    """Nothing after the head, or too little: skipped."""
    for spec in ("", "s", "su", "sua", "suau"):
        assert plan_truncate(entries(spec)) == Skip("nothing_to_truncate"), spec


def test_span_hides_uses_positions() -> None:
    """A span's hides range runs from its first entry's position to its last entry's end."""
    items = [
        Entry(position=1, seq=1, role="system", tokens=5, marker=None),
        Entry(position=2, seq=2, role="user", tokens=5, marker=None),
        Entry(position=3, seq=40, role="user", tokens=50, marker="condense", last=29),
        Entry(position=30, seq=30, role="assistant", tokens=5, marker=None),
        Entry(position=31, seq=31, role="user", tokens=5, marker=None),
    ]
    assert Span(2, 4).hides(items) == (3, 30)
    assert Span(2, 4).tokens(items) == 55
    assert Span(1, 2).hides(items) == (2, 2)


def test_span_ending_on_a_marker_covers_what_the_marker_hid() -> None:
    """Hiding a summary that stands for 3..29 must hide 3..29, not only position 3.

    Regression: the range stopped at the marker's position, so a truncation (or elision) of a
    lone summary brought the records it had summarised back into the context.
    """
    items = [
        Entry(position=1, seq=1, role="system", tokens=5, marker=None),
        Entry(position=2, seq=2, role="user", tokens=5, marker=None),
        Entry(position=3, seq=40, role="user", tokens=50, marker="condense", last=29),
        Entry(position=30, seq=30, role="assistant", tokens=5, marker=None),
    ]
    assert Span(2, 3).hides(items) == (3, 29)
    assert Span(1, 3).hides(items) == (2, 29)


def test_entry_of_records_and_markers() -> None:
    """Entry.of: a record stands at its seq; a marker at hides[0], reaching to hides[1]."""
    record = {"seq": 7, "role": "tool", "tokens": 12, "tool_call_id": "x", "content": "r"}
    assert Entry.of(record) == Entry(position=7, seq=7, role="tool", tokens=12, marker=None)
    marker = {"seq": 9, "role": "user", "tokens": 4, "type": "marker", "marker": "truncation"}
    marker["hides"] = [3, 6]
    entry = Entry.of(marker)
    assert (entry.position, entry.seq, entry.marker, entry.last) == (3, 9, "truncation", 6)


@st.composite
def conversations(draw: st.DrawFn) -> str:
    """Role strings of valid conversations: system?, instruction, then turns and tool groups."""
    spec = "s" * draw(st.integers(0, 2)) + draw(st.sampled_from(["u", "a"]))
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["u", "a", "tools", "c", "r"]))
        spec += "a" + "t" * draw(st.integers(1, 3)) if kind == "tools" else kind
    return spec


def test_condense_keeps_fewer_recent_messages_when_they_would_not_leave_room() -> None:
    """Large recent messages: a condense keeps only as many of the last ``keep_recent`` as fit
    in ``room``, and always the newest (with its call, when it is a tool result)."""
    spec = "uauauauauaua"
    sizes = [10] * 8 + [500, 10, 500, 10]
    assert plan_condense(entries(spec, sizes), keep_recent=4, min_to_compress=2) == Span(1, 8)
    assert plan_condense(entries(spec, sizes), keep_recent=4, min_to_compress=2, room=519) == Span(
        1, 10
    )
    assert plan_condense(entries(spec, sizes), keep_recent=4, min_to_compress=2, room=0) == Span(
        1, 11
    )
    calls = entries("uauaat", [10, 10, 10, 10, 10, 900])
    assert plan_condense(calls, keep_recent=5, min_to_compress=1, room=0) == Span(1, 4)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(conversations(), st.integers(1, 8), st.integers(1, 8))
def test_condense_plans_are_always_pair_safe(spec: str, keep: int, minimum: int) -> None:
    """Any condense plan: after the head, pair-safe, at least MIN entries, last `keep` kept."""
    items = entries(spec)
    plan = plan_condense(items, keep_recent=keep, min_to_compress=minimum)
    if isinstance(plan, Skip):
        assert plan.reason in {"too_few_messages", "recently_condensed"}
        return
    assert plan.start >= head_length(items)
    assert plan.end <= len(items) - keep
    assert plan.end - plan.start >= minimum
    assert_pair_safe(items, plan)
    assert not any(e.marker == "condense" for e in items[plan.end :])


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(conversations())
def test_truncate_plans_are_always_pair_safe(spec: str) -> None:
    """Any truncation plan: after the head, pair-safe, leaving the last entry; more than half
    only to take a call's results along."""
    items = entries(spec)
    plan = plan_truncate(items)
    if isinstance(plan, Skip):
        assert plan.reason == "nothing_to_truncate"
        return
    head = head_length(items)
    assert plan.start >= head
    assert plan.end < len(items)
    assert_pair_safe(items, plan)
    if plan.end - plan.start > (len(items) - head) // 2:
        assert items[plan.end - 1].role == "tool"


def test_elision_candidates_after_what_truncation_keeps_go_first_largest_first() -> None:
    """Entries after the head come first, largest first; small entries are not candidates;
    the system prompt waits with the head."""
    items = entries("suatu", [900, 10, 200, 500, 200])
    assert elision_order(items, minimum=64) == ([3, 2, 4], [0])
    assert elision_order([]) == ([], [])


def test_what_truncation_keeps_gives_way_largest_first() -> None:
    """System messages, the instruction and the newest summary compete by size: a system
    prompt larger than the budget is cut before a short instruction, and a long first user
    message (a demonstration) before a short system prompt."""
    items = entries("ssuatu", [4000, 6000, 300, 200, 500, 200])
    assert elision_order(items, minimum=64) == ([4, 3, 5], [1, 0, 2])
    # A demonstration, then the task: both user messages before the first reply are the
    # instruction, kept; the demonstration gives way first.
    demonstration = entries("suuat", [1200, 5000, 1100, 100, 100])
    assert elision_order(demonstration, minimum=64) == ([3, 4], [1, 0, 2])
    assert elision_order(entries("ss", [900, 900])) == ([], [0, 1])


def test_summaries_and_truncation_markers_give_way_last() -> None:
    """A truncation marker's list of facts and a summary are memory: cut after every
    message, the head included, however large they are."""
    items = entries("surcatu", [100, 50, 500, 600, 300, 200, 400])
    assert elision_order(items, minimum=64) == ([6, 4, 5], [0, 3, 2])


def test_a_span_counts_the_messages_its_markers_hid_not_the_markers() -> None:
    """A marker entry stands for the messages it hid; one written before the count was stored
    counts as one, as it did then."""
    marker = {"role": "user", "tokens": 5, "type": "marker"}
    summary = marker | {"seq": 30, "content": "s", "marker": "condense"}
    truncation = marker | {"seq": 31, "content": "t", "marker": "truncation"}
    message = {"seq": 12, "role": "user", "content": "m", "tokens": 5}
    items = [
        Entry.of(summary | {"hides": [3, 9], "hidden_messages": 6}),
        Entry.of(truncation | {"hides": [10, 11]}),  # stored without its count
        Entry.of(message),
    ]
    assert [e.messages for e in items] == [6, 1, 1]
    assert Span(0, 3).messages(items) == 8
    assert Span(1, 3).messages(items) == 2


def test_a_head_ending_on_a_call_keeps_its_results() -> None:
    """A rewind can leave an assistant's call first after the system prompt: its results
    belong to the head, and no truncation starts on one of them (one started on the last
    result and hid it alone, leaving its call unanswered in the payload)."""
    items = entries("satttatta")
    assert head_length(items) == 5
    span = plan_truncate(items)
    assert isinstance(span, Span)
    assert_pair_safe(items, span)
    assert span.start == 5
