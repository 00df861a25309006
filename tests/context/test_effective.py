"""Unit tests of the effective context (app/context/effective.py): which records a payload shows.

Records are built by hand: a message is ``{"seq", "role", "content", "tokens"}``; a compaction
marker adds the envelope ``"type": "marker"``, ``"marker"`` and ``"hides": [a, b]`` and stands at
position a; a rewind marker is ``{"seq", "type": "marker", "marker": "rewind", "to_seq",
"include_target"}``.
"""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.context import effective
from tests.support.reference import reference_context

pytestmark = pytest.mark.database_agnostic

Record = dict[str, Any]


def message(seq: int, role: str = "user") -> Record:
    """A plain message record."""
    return {"seq": seq, "role": role, "content": f"m{seq}", "tokens": 5}


def compaction(seq: int, low: int, high: int, kind: str = "condense") -> Record:
    """A compaction marker appended at ``seq`` that hides positions [low, high]."""
    return {
        "seq": seq,
        "role": "user",
        "content": f"{kind} {low}-{high}",
        "type": "marker",
        "marker": kind,
        "hides": [low, high],
        "tokens": 3,
    }


def rewind(seq: int, to_seq: int, include_target: bool = False) -> Record:
    """A rewind marker appended at ``seq``."""
    return {
        "seq": seq,
        "type": "marker",
        "marker": "rewind",
        "to_seq": to_seq,
        "include_target": include_target,
        "tokens": 0,
    }


def shown(records: list[Record]) -> list[int]:
    """The seqs of the visible records, in payload order (markers included, by their seq)."""
    markers = [r for r in records if effective.is_marker(r)]
    return [r["seq"] for r in effective.visible(records, effective.plan(markers))]


def test_no_markers_shows_everything_in_order() -> None:
    """Without markers the effective context is the history itself."""
    records = [message(s) for s in range(1, 6)]
    assert shown(records) == [1, 2, 3, 4, 5]


def test_position_of_records_and_markers() -> None:
    """A message stands at its seq; a compaction marker at the start of what it hides."""
    assert effective.position(message(7)) == 7
    assert effective.position(compaction(9, 3, 5)) == 3
    assert effective.position(compaction(9, 4, 4, kind="elision")) == 4
    assert effective.position(compaction(9, 2, 6, kind="truncation")) == 2


def test_compaction_hides_its_range_by_position() -> None:
    """A condense hiding [2, 4] removes 2..4 and is shown in their place."""
    records = [message(s) for s in range(1, 7)] + [compaction(7, 2, 4)]
    assert shown(records) == [1, 7, 5, 6]


def test_marker_is_rendered_at_position_a_not_at_its_seq() -> None:
    """A marker appended late still appears where its hidden range began."""
    records = [message(s) for s in range(1, 10)] + [compaction(10, 3, 4)]
    records += [message(11), message(12)]
    assert shown(records) == [1, 2, 10, 5, 6, 7, 8, 9, 11, 12]


def test_every_compaction_kind_hides() -> None:
    """condense, truncation and elision markers all hide what their range covers."""
    for kind in ("condense", "truncation", "elision"):
        records = [message(s) for s in range(1, 5)] + [compaction(5, 3, 3, kind)]
        assert shown(records) == [1, 2, 5, 4], kind


def test_later_marker_hides_an_older_marker_in_its_range() -> None:
    """A later compaction over a span holding an older marker's position hides that marker."""
    records = [message(s) for s in range(1, 9)]
    records += [compaction(9, 3, 4), compaction(10, 2, 6)]
    assert shown(records) == [1, 10, 7, 8]
    active = effective.plan([r for r in records if effective.is_marker(r)])
    assert [m["seq"] for m in active.compactions] == [10]
    assert active.hidden == [(2, 6)]


def test_later_marker_outside_an_older_ones_position_keeps_both() -> None:
    """Only a marker's position counts: a range past it leaves the older marker in force."""
    records = [message(s) for s in range(1, 9)]
    records += [compaction(9, 2, 3), compaction(10, 5, 6)]
    assert shown(records) == [1, 9, 4, 10, 7, 8]
    active = effective.plan([r for r in records if effective.is_marker(r)])
    assert [m["seq"] for m in active.compactions] == [9, 10]


def test_nested_markers_chain() -> None:
    """A condense of a span holding a truncation that holds an elision: only the last shows."""
    records = [message(s) for s in range(1, 11)]
    records += [
        compaction(11, 4, 4, "elision"),
        compaction(12, 3, 5, "truncation"),
        compaction(13, 2, 8, "condense"),
    ]
    assert shown(records) == [1, 13, 9, 10]


def test_marker_covering_an_older_markers_range_but_not_its_position() -> None:
    """A range [3, 6] does not hide a marker standing at 2, even if that marker hid 2..4."""
    records = [message(s) for s in range(1, 9)]
    records += [compaction(9, 2, 4), compaction(10, 3, 6)]
    # Marker 9 stays (position 2); marker 10 stands at 3; 2..6 hidden either way.
    assert shown(records) == [1, 9, 10, 7, 8]


def test_rewind_removes_later_records() -> None:
    """A rewind to seq 4 (target not kept) removes 4 and everything up to the rewind."""
    records = [message(s) for s in range(1, 7)] + [rewind(7, 4)]
    assert shown(records) == [1, 2, 3]
    records += [message(8), message(9)]
    assert shown(records) == [1, 2, 3, 8, 9]


def test_rewind_include_target_keeps_the_target() -> None:
    """With include_target the target message stays; what followed it goes."""
    records = [message(s) for s in range(1, 7)] + [rewind(7, 4, include_target=True)]
    assert shown(records) == [1, 2, 3, 4]
    active = effective.plan([records[-1]])
    assert active.removed == [(5, 6)]


def test_rewind_to_the_last_message_with_include_target_removes_nothing() -> None:
    """Keeping the target when it is the last message changes nothing."""
    records = [message(s) for s in range(1, 5)] + [rewind(5, 4, include_target=True)]
    assert shown(records) == [1, 2, 3, 4]
    assert effective.plan([records[-1]]).removed == []


def test_rewind_removes_later_compactions_so_hidden_records_come_back() -> None:
    """A compaction made after the cut leaves with it: what it hid is visible again."""
    records = [message(s) for s in range(1, 9)] + [compaction(9, 2, 6), message(10)]
    assert shown(records) == [1, 9, 7, 8, 10]
    records.append(rewind(11, 8, include_target=True))
    assert shown(records) == [1, 2, 3, 4, 5, 6, 7, 8]
    active = effective.plan([r for r in records if effective.is_marker(r)])
    assert active.compactions == []
    assert active.hidden == []


def test_rewind_to_before_a_compaction_range_removes_records_and_marker() -> None:
    """A cut inside a compacted span: the marker goes, records before the cut come back."""
    records = [message(s) for s in range(1, 9)] + [compaction(9, 2, 6)]
    records.append(rewind(10, 4))
    assert shown(records) == [1, 2, 3]


def test_compaction_before_the_cut_stays_in_force() -> None:
    """A compaction older than the cut survives a rewind to a later message."""
    records = [message(s) for s in range(1, 9)] + [compaction(9, 2, 4), message(10)]
    records.append(rewind(11, 10))  # removes 10 only: the marker (seq 9) is before the cut
    assert shown(records) == [1, 9, 5, 6, 7, 8]


def test_compaction_after_a_rewind_hides_new_records() -> None:
    """Markers appended after a rewind apply to the records visible then."""
    records = [message(s) for s in range(1, 6)] + [rewind(6, 3)]
    records += [message(s) for s in range(7, 12)] + [compaction(12, 7, 9)]
    assert shown(records) == [1, 2, 12, 10, 11]


def test_rewind_removed_by_a_later_rewind_is_not_in_force() -> None:
    """A later rewind whose range covers an earlier rewind undoes it: its records return."""
    records = [message(s) for s in range(1, 6)] + [rewind(6, 2)]
    records += [message(7), message(8)]
    assert shown(records) == [1, 7, 8]
    records.append(rewind(9, 4))  # removes 4..8, which holds rewind 6
    assert shown(records) == [1, 2, 3]
    active = effective.plan([r for r in records if effective.is_marker(r)])
    assert active.removed == [(4, 8)]


def test_a_later_rewind_not_covering_an_earlier_one_adds_to_it() -> None:
    """Two rewinds with disjoint ranges both remove their records."""
    records = [message(s) for s in range(1, 5)] + [rewind(5, 3)]
    records += [message(6), message(7), rewind(8, 7)]
    assert shown(records) == [1, 2, 6]
    active = effective.plan([r for r in records if effective.is_marker(r)])
    assert sorted(active.removed) == [(3, 4), (7, 7)]


def test_rewind_removed_by_later_rewind_brings_back_its_compaction() -> None:
    """Undoing a rewind restores the compaction it had removed (and what that hid)."""
    records = [message(s) for s in range(1, 9)] + [compaction(9, 2, 5), message(10)]
    records.append(rewind(11, 6))  # removes 6..10: the condense goes, 2..5 return
    assert shown(records) == [1, 2, 3, 4, 5]
    records.append(message(12))
    records.append(rewind(13, 10))  # removes 10..12, rewind 11 included: 6..9 return
    assert shown(records) == [1, 9, 6, 7, 8]


def test_rewind_markers_are_never_shown() -> None:
    """A rewind is bookkeeping, not a message: it never reaches a payload."""
    records = [message(s) for s in range(1, 4)] + [rewind(4, 3, include_target=True)]
    records.append(message(5))
    out = list(effective.visible(records, effective.plan([records[3]])))
    assert [r["seq"] for r in out] == [1, 2, 3, 5]
    assert all(r.get("marker") != "rewind" for r in out)


def test_plan_accepts_markers_in_any_order() -> None:
    """The plan sorts markers by seq: the outcome does not depend on input order."""
    markers = [compaction(10, 2, 6), rewind(12, 3), compaction(9, 3, 4), compaction(11, 7, 8)]
    forward = effective.plan(sorted(markers, key=lambda m: m["seq"]))
    backward = effective.plan(list(reversed(markers)))
    assert forward == backward


def test_visible_streams_records_once() -> None:
    """visible() consumes an iterator (a single pass over messages.jsonl)."""
    records = [message(s) for s in range(1, 8)] + [compaction(8, 3, 5)]
    active = effective.plan([records[-1]])
    assert [r["seq"] for r in effective.visible(iter(records), active)] == [1, 2, 8, 6, 7]


def test_marker_at_the_end_is_emitted_after_the_last_record() -> None:
    """A marker hiding the last records is emitted when the records run out."""
    records = [message(s) for s in range(1, 6)] + [compaction(6, 4, 5)]
    assert shown(records) == [1, 2, 3, 6]


# -- against a reference model ----------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Record]:
    """Random histories built the way the service builds them: markers refer to what shows."""
    records: list[Record] = [message(1, "system"), message(2)]
    for _ in range(draw(st.integers(0, 40))):
        seq = len(records) + 1
        op = draw(st.sampled_from(["message", "message", "compaction", "mask", "rewind"]))
        current = reference_context(records)
        if op == "compaction" and len(current) >= 2:
            first = draw(st.integers(1, len(current) - 1))
            last = draw(st.integers(first, len(current) - 1))
            end = current[last]
            high = end["hides"][1] if "hides" in end else end["seq"]
            kind = draw(st.sampled_from(sorted(effective.COMPACTION_KINDS)))
            records.append(compaction(seq, effective.position(current[first]), high, kind))
        elif op == "mask" and current:
            chosen = draw(
                st.sets(st.sampled_from([r["seq"] for r in current if "marker" not in r]))
            )
            records.append(mask(seq, sorted(chosen)))
        elif op == "rewind":
            targets = [r["seq"] for r in records if not effective.is_marker(r)]
            target = draw(st.sampled_from(targets))
            records.append(rewind(seq, target, draw(st.booleans())))
        else:
            records.append(message(seq, draw(st.sampled_from(["user", "assistant"]))))
    return records


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(histories())
def test_visible_matches_the_reference_model(records: list[Record]) -> None:
    """plan + visible agree with the naive state machine on service-like histories."""
    markers = [r for r in records if effective.is_marker(r)]
    assert list(effective.visible(records, effective.plan(markers))) == reference_context(records)


def mask(seq: int, masked: list[int]) -> Record:
    """A mask marker appended at ``seq`` that masks the records ``masked``."""
    masks = [{"seq": s, "content": f"[masked {s}]", "tokens": 1} for s in masked]
    return {"seq": seq, "type": "marker", "marker": "mask", "masks": masks, "tokens": 0}


def test_a_mask_replaces_a_cut_result_but_not_a_later_cut_of_its_placeholder() -> None:
    """An elision cut result 3 (seq 4); a mask then names result 3: its placeholder shows in
    the elision's place. A later elision (seq 6) cuts the placeholder: that cut shows. As
    posted, result 3 shows whole throughout; a rewind to before the mask brings the first cut
    back."""
    records = [message(1), message(2, "assistant"), message(3, "tool")]
    records += [compaction(4, 3, 3, "elision"), mask(5, [3])]
    out = list(effective.visible(records, effective.plan(records)))
    assert [r["content"] for r in out] == ["m1", "m2", "[masked 3]"]
    assert out[2]["seq"] == 4  # the marker's own seq: the mask replaces what it shows
    records.append(compaction(6, 3, 3, "elision"))
    assert [r["content"] for r in effective.visible(records, effective.plan(records))] == [
        "m1",
        "m2",
        "elision 3-3",
    ]
    posted = effective.visible(records, effective.plan(records), as_posted=True)
    assert [r["content"] for r in posted] == ["m1", "m2", "m3"]
    records.append(rewind(7, 4, include_target=True))
    assert [r["content"] for r in effective.visible(records, effective.plan(records))] == [
        "m1",
        "m2",
        "elision 3-3",
    ]
    assert [r["seq"] for r in effective.visible(records, effective.plan(records))][-1] == 4


def test_a_mask_replaces_what_a_record_shows_and_a_rewind_brings_it_back() -> None:
    records = [message(1, "system"), message(2), message(3, "tool"), mask(4, [3]), message(5)]
    out = list(effective.visible(records, effective.plan(records)))
    assert [r["content"] for r in out] == ["m1", "m2", "[masked 3]", "m5"]
    assert out[2]["tokens"] == 1
    assert out[2][effective.MASKED_BY] == 4
    unmasked = effective.visible(records, effective.plan(records), as_posted=True)
    assert [r["content"] for r in unmasked] == ["m1", "m2", "m3", "m5"]
    records.append(rewind(6, 3, include_target=True))  # undoes the mask made after seq 3
    assert [r["content"] for r in effective.visible(records, effective.plan(records))] == [
        "m1",
        "m2",
        "m3",
    ]
