"""The extractive digest (app/summaries/digest.py and the rules, collectors and layout it
stands on): bounded, deterministic, honest, and what it keeps of the corpus."""

import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

from app.compaction.truncation import HiddenFacts, truncation_text
from app.context.effective import MARKER_TYPE
from app.formats.parts import parse_arguments
from app.summaries.collectors import KEPT_MAX, MAX_PATHS, MAX_PENDING_CALLS, DigestState, ErrorGroup
from app.summaries.digest import extractive_digest, render
from app.summaries.excerpts import normalize
from app.summaries.layout import KEPT_TITLE, OUTPUT_PATHS, ROOT_TOKEN, listed_sections
from app.summaries.rules import (
    TIER_OUTPUT,
    find_error_lines,
    find_paths,
    record_errors,
    record_paths,
    record_text,
    shows_error_line,
)
from app.tokens.counters import counter_for
from tests.support.corpus import CORPUS_FILES, corpus_messages
from tests.support.paths import CORPUS

pytestmark = pytest.mark.database_agnostic

Record = dict[str, Any]
CUT_MARK = "chars cut"
RECALL_FILES = 10


# --- helpers ---------------------------------------------------------------------------------


@cache
def corpus_file(name: str) -> tuple[Record, ...]:
    return tuple(corpus_messages(name))


def longest_files(count: int) -> list[str]:
    files = sorted(CORPUS.glob("*.jsonl"), key=lambda path: (-path.stat().st_size, path.name))
    return [path.name for path in files[:count]]


def middle_span(records: tuple[Record, ...]) -> list[Record]:
    """The middle 60% of a conversation: what a condense would summarise."""
    return list(records[int(len(records) * 0.2) : int(len(records) * 0.8)])


def parse(digest: str) -> tuple[str | None, dict[str, list[str]]]:
    """The digest's $ROOT and its sections' items (the "(+N more)" lines included)."""
    root = None
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in digest.split("\n"):
        if line.startswith(f"{ROOT_TOKEN} = "):
            root = line.removeprefix(f"{ROOT_TOKEN} = ")
        elif line.endswith(":") and not line.startswith("- "):
            current = sections.setdefault(line[:-1], [])
        elif line.startswith("- ") and current is not None:
            current.append(line[2:])
        else:
            current = None
    return root, sections


COUNTER = counter_for("gpt-4o", "auto")


def listed(digest: str, *titles: str) -> list[str]:
    """The items of these sections with $ROOT expanded, without the "(+N more)" lines."""
    root, sections = parse(digest)
    items = [item for title in titles for item in sections.get(title, [])]
    expanded = [item.replace(ROOT_TOKEN, root) if root else item for item in items]
    return [item for item in expanded if not item.startswith("(+")]


def total(items: list[str]) -> int:
    """The items a cut list stands for: those shown plus its "(+N more)"."""
    more = [int(item[2:].split()[0]) for item in items if item.startswith("(+")]
    return len(items) - len(more) + sum(more)


def grouped_lines(item: str) -> list[str]:
    """The lines an Errors item shows: itself, or each line of the group it lists."""
    group = ErrorGroup.parse(item, 0)
    if group.slot is None:
        return [item]
    lines = []
    for value in [group.values[group.slot], *group.others]:
        values = [*group.values[: group.slot], value, *group.values[group.slot + 1 :]]
        parts = [group.pieces[0]]
        for piece, between in zip(values, group.pieces[1:], strict=True):
            parts += [piece, between]
        lines.append("".join(parts))
    return lines


def error_lines(items: list[str]) -> int:
    """The error lines a cut Errors list stands for: a group's listed values and its
    "(N more)", a line, and the groups a "(+N more)" left out (one line each, at least)."""
    count = 0
    for item in items:
        if item.startswith("(+"):
            count += int(item[2:].split()[0])
            continue
        group = ErrorGroup.parse(item, 0)
        count += 1 if group.slot is None else 1 + len(group.others) + group.more
    return count


def covered(path: str, shown: set[str]) -> bool:
    """Listed, or folded into a longer listed path that ends with it."""
    return path in shown or any(longer.endswith("/" + path) for longer in shown)


def input_text(records: list[Record]) -> str:
    """Everything a digest may quote from: contents and tool-call arguments, normalized."""
    parts = []
    for record in records:
        parts.append(record_text(record))
        for call in record.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            parts.append(arguments)
            parts.extend(str(value) for value in parse_arguments(arguments).values())
    return normalize("\n".join(parts))


def unquoted(item: str) -> list[str]:
    """The verbatim pieces of a quoted item: cut marks, a repeat count and a trailing ellipsis
    removed."""
    item = re.sub(r" \(x\d+\)$", "", item)
    pieces = [item.removesuffix("…")]
    if CUT_MARK in item:
        head, rest = item.split(" [… ", 1)
        pieces = [head, rest.split(" …] ", 1)[1]]
    return [piece for piece in pieces if piece]


def tool_call(call_id: str, name: str, **arguments: Any) -> Record:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def assistant(text: str, *calls: Record) -> Record:
    record: Record = {"role": "assistant", "content": text}
    if calls:
        record["tool_calls"] = list(calls)
    return record


def result(call_id: str, text: str) -> Record:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def user(text: str) -> Record:
    return {"role": "user", "content": text}


# --- rules -----------------------------------------------------------------------------------


def test_path_rules() -> None:
    """Paths need a directory part or a known extension; URLs, globs, fragments and framework
    names are not paths."""
    text = (
        "see https://github.com/a/b.md, ${DIR}/x.txt, *.test.ts, README.md, Next.js, "
        "app/main.py, ./a/b, /usr/lib, res.json(), ~/x/y, 1/2, and/or, s/foo/bar/g."
    )
    assert find_paths(text) == ["README.md", "app/main.py", "./a/b", "/usr/lib", "~/x/y"]


def test_error_rules() -> None:
    """Error-like lines are found; file views, search hits, Markdown prose and exit code 0 are
    not errors; a bare label is joined with its message."""
    text = "\n".join(
        [
            "Exit code 0",
            "ERROR:",
            "No replacement was performed.",
            "    12\traise ValueError('x')",
            "  7→  {:error, reason} -> Error: no",
            "lib/a.ex:3: Error: in a grep hit",
            "src/a.c:3:5: error: expected ';'",
            "- **Error handling**: documented",
            "ValueError: bad value",
            "Process exited with code 2",
            "bash: rg: command not found",
            "接続エラーが発生しました",
        ]
    )
    assert find_error_lines(text) == [
        "ERROR: No replacement was performed.",
        "src/a.c:3:5: error: expected ';'",
        "ValueError: bad value",
        "Process exited with code 2",
        "bash: rg: command not found",
        "接続エラーが発生しました",
    ]


def test_record_tiers() -> None:
    """A path argument or a command is what a tool acted on; other arguments and texts are
    mentions; tool results are output."""
    call = tool_call("c1", "Edit", file_path="/p/a.py", new_string="see b/c.py")
    shell = tool_call("c2", "Bash", command="cat x/y.txt")
    assert record_paths(assistant("look at d/e.md", call, shell)) == [
        ("d/e.md", 1),
        ("/p/a.py", 0),
        ("b/c.py", 1),
        ("x/y.txt", 0),
    ]
    assert record_paths(result("c1", "wrote /p/a.py")) == [("/p/a.py", TIER_OUTPUT)]


# --- digest shape ----------------------------------------------------------------------------


def test_empty_input() -> None:
    """No messages (marker records are not messages): a one-line digest that says so."""
    assert extractive_digest([]) == "Extractive digest of 0 messages."
    rewind = {"seq": 3, "type": "marker", "marker": "rewind", "to_seq": 1}
    assert extractive_digest([rewind]) == "Extractive digest of 0 messages."


def test_the_kept_message_is_quoted_apart_and_not_counted() -> None:
    """The first user message given as kept: its start under its own heading, before the
    span's sections; not one of the messages digested, nor one of their requests or files."""
    task = {"role": "user", "content": "Port src/legacy.py to the new API.  " + "Details. " * 40}
    span = [{"seq": 3, "role": "assistant", "content": "Reading it."}]

    digest = extractive_digest(span, kept=task)

    header, kept, *rest = digest.split("\n\n")
    assert header == "Extractive digest of 1 messages (seq 3-3): 1 assistant."
    title, item = kept.split("\n")
    assert title == f"{KEPT_TITLE}:"
    assert item.startswith("- Port src/legacy.py to the new API. Details.")
    assert item.endswith("…")
    assert len(item) == len("- ") + KEPT_MAX
    assert "src/legacy.py" not in "\n".join(rest)
    assert extractive_digest(span) == "\n\n".join([header, *rest])


def test_sections_and_outcomes() -> None:
    """Each section shows what the records say: calls paired with their results by id, the
    outcome (error/ok and a line), errors, files, the latest state; seqs label user requests."""
    records = [
        user("Fix the failing test in tests/test_a.py please."),
        assistant(
            "I will run the tests first. Then fix them.",
            tool_call("c1", "Bash", command="pytest -q"),
            tool_call("c2", "Read", file_path="/repo/src/a.py"),
            tool_call("c3", "Bash", command="ls"),
        ),
        result("c1", "Exit code 1\nFAILED tests/test_a.py::test_x - AssertionError: 1 != 2"),
        result("c2", "     1\tdef f():\n     2\t    return 1\n"),
        assistant("The fix is a one-liner.", tool_call("c4", "Write", file_path="/repo/b.py")),
    ]
    for seq, record in enumerate(records, start=10):
        record["seq"] = seq
    digest = extractive_digest(records)
    _, sections = parse(digest)
    assert digest.startswith("Extractive digest of 5 messages (seq 10-14): 2 assistant,")
    assert sections["User requests"] == ["[seq 10] Fix the failing test in tests/test_a.py please."]
    assert sections["Assistant notes"] == [
        "I will run the tests first. Then fix them.",
        "The fix is a one-liner.",
    ]
    failure = "Exit code 1 FAILED tests/test_a.py::test_x - AssertionError: 1 != 2"
    assert sections["Tool calls"] == [
        f"Bash pytest -q -> error: {failure}",
        "Read /repo/src/a.py -> ok: 2 lines of a file view",
        "Bash ls -> (no result)",
        "Write /repo/b.py -> (no result)",
    ]
    assert sections["Errors"] == [
        failure,
        "FAILED tests/test_a.py::test_x - AssertionError: 1 != 2",
    ]
    assert sections["Files"] == ["tests/test_a.py", "/repo/src/a.py", "/repo/b.py"]
    assert sections["Latest state"] == [
        "Last assistant text: The fix is a one-liner.",
        "Last tool call: Write /repo/b.py -> (no result)",
    ]


def test_content_parts_and_japanese() -> None:
    """Content given as parts is read as text; Japanese error words count as errors."""
    parts = [
        {"type": "text", "text": "設定ファイルの読み込みに失敗しました"},
        {"type": "image_url"},
    ]
    digest = extractive_digest([user("直して"), {"role": "user", "content": parts}])
    assert listed(digest, "Errors") == ["設定ファイルの読み込みに失敗しました"]


def test_long_user_request_cut_in_the_middle() -> None:
    """A long request keeps its verbatim head and tail around a marker saying how much was cut."""
    text = "START " + "word " * 1000 + " END"
    [item] = listed(extractive_digest([user(text)]), "User requests")
    head, tail = unquoted(item)
    assert normalize(text).startswith(head)
    assert normalize(text).endswith(tail)
    cut = len(normalize(text)) - len(head) - len(tail)
    assert f"[… {cut} chars cut …]" in item


def test_long_requests_are_cut_before_any_request_is_left_out() -> None:
    """Twelve requests of 1,500 characters in a digest with room for about three of them
    whole: every one is listed, the longest cut to one length, each with its start (what was
    asked) kept."""
    texts = [f"Request {i}: " + f"please change module {i} " * 60 for i in range(12)]
    digest = extractive_digest([user(text) for text in texts], max_chars=6000)
    items = listed(digest, "User requests")
    assert len(items) == len(texts)
    for item, text in zip(items, texts, strict=True):
        head, _ = unquoted(item)
        assert normalize(text).startswith(head)
        assert len(head) >= 200
    assert len({len(item) for item in items}) <= 2  # one length (a count's digits may differ)


def test_root_abbreviation() -> None:
    """A directory holding many paths is named once as $ROOT; an input that itself writes
    "$ROOT" is not abbreviated."""
    root = "/home/someone/projects/long-project-name"
    paths = [f"/{('src', 'tests')[i % 2]}/m{i}.py" for i in range(6)]
    calls = [tool_call(f"c{i}", "Read", file_path=root + path) for i, path in enumerate(paths)]
    digest = extractive_digest([assistant("", *calls)])
    assert f"\n{ROOT_TOKEN} = {root}\n" in digest
    assert parse(digest)[1]["Files"] == [ROOT_TOKEN + path for path in paths]
    assert listed(digest, "Files") == [root + path for path in paths]
    plain = extractive_digest([user("echo $ROOT"), assistant("", *calls)])
    assert ROOT_TOKEN not in plain.replace("echo $ROOT", "")


def noisy_session(count: int) -> Iterator[Record]:
    """A long synthetic session: a request, then calls that act on files, fail, print paths."""
    yield user("Please migrate the service to the new API.")
    for index in range(count):
        call_id = f"call_{index}"
        call = tool_call(call_id, "Bash", command=f"make -C src/mod{index}/build.mk")
        yield assistant(f"Step {index}: building module {index}.", call)
        output = [f"out/gen{index}_{line}/file.txt" for line in range(5)]
        if index % 25 == 0:
            output.append(f"Error: module {index} failed")
        yield result(call_id, "\n".join(output))


def test_bounded_state() -> None:
    """Streaming 2,000 calls over 12,000 distinct paths keeps every list capped, and the digest
    still counts exactly what it left out."""
    state = DigestState()
    for record in noisy_session(2000):
        state.add(record)
    assert len(state.paths.paths) == MAX_PATHS
    assert len(state.pending) <= MAX_PENDING_CALLS
    assert len(state.calls.items()) == state.calls.head + state.calls.tail
    assert len(state.notes.items()) == state.notes.head + state.notes.tail
    # The acted-on paths (2,000) evicted output paths first.
    kept_tiers = [tier for tier, _ in state.paths.paths.values()]
    assert kept_tiers.count(0) == MAX_PATHS
    digest = extractive_digest(noisy_session(2000))
    _, sections = parse(digest)
    assert total(sections["Files"]) == 2000
    assert total(sections[OUTPUT_PATHS]) == 10_000
    assert error_lines(sections["Errors"]) == 80
    assert sections["User requests"] == ["Please migrate the service to the new API."]


@cache
def mixed_state() -> DigestState:
    state = DigestState()
    for record in [*noisy_session(300), *corpus_file("claude-code__spotter_8463c716.jsonl")]:
        state.add(record)
    return state


@pytest.mark.parametrize("max_chars", [0, 1, 40, 120, 400, 1500, 6000, 20_000])
def test_bound_respected(max_chars: int) -> None:
    """The digest never exceeds max_chars, for tiny and large budgets alike (rendering does not
    change the state, so one state serves every budget)."""
    digest = render(mixed_state(), max_chars)
    assert len(digest) <= max_chars
    if max_chars >= 1500:
        assert set(parse(digest)[1]) >= {"User requests", "Errors", "Files"}


def test_priorities_under_a_small_budget() -> None:
    """Cut hard, the digest keeps the request, the errors and acted-on files, and says how many
    items each cut list left out."""
    digest = extractive_digest(noisy_session(200), max_chars=1500)
    _, sections = parse(digest)
    assert sections["User requests"] == ["Please migrate the service to the new API."]
    assert error_lines(sections["Errors"]) == 8
    assert total(sections["Files"]) == 200
    assert all(item.startswith(("src/mod", "(+")) for item in sections["Files"])
    assert sections[OUTPUT_PATHS] == ["(+1000 more)"]


class OneShot:
    """An iterable that may be iterated only once."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.used = False

    def __iter__(self) -> Iterator[Record]:
        assert not self.used, "records iterated twice"
        self.used = True
        return iter(self.records)


def test_deterministic_and_single_pass() -> None:
    """The same records give the same digest, whether from a list or a one-shot iterable."""
    records = middle_span(corpus_file("codex__codemie_rollout_019e1625.jsonl"))
    first = extractive_digest(records)
    assert extractive_digest(records) == first
    assert extractive_digest(OneShot(records)) == first


# --- the corpus ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_honest_on_the_corpus(name: str) -> None:
    """Every listed path, error line (each line of a group), user request and last assistant
    text occurs in the input (whitespace collapsed), and the digest fits the default budget."""
    records = list(corpus_file(name))
    digest = extractive_digest(records)
    assert len(digest) <= 6000
    source = input_text(records)
    quoted = listed(digest, "Files", OUTPUT_PATHS, "User requests")
    for item in listed(digest, "Errors"):  # a line as it was, or a group's lines (a line
        # that lists numbers itself, "[100, 150]", reads as a group too)
        whole = all(piece in source for piece in unquoted(item))
        quoted += [item] if whole else grouped_lines(item)
    latest = [
        item.removeprefix("Last assistant text: ")
        for item in listed(digest, "Latest state")
        if item.startswith("Last assistant text: ")
    ]
    for item in [*quoted, *latest]:
        for piece in unquoted(item):
            assert piece in source, piece


def test_recall_over_the_longest_files(capsys: pytest.CaptureFixture[str]) -> None:
    """For the 10 longest files, the middle 60% is digested at the default 6000 chars and
    compared with the paths and error lines the same rules find in it.

    Measured (primary = paths tools acted on or texts mentioned; all = with paths seen only in
    tool output):
        file                                           primary  all      errors
        codex-exec__ja_issue-391_revise                4/4      60/60    2/2
        codex-exec__ja_issue-391_implementation        10/10    90/123   5/5
        claude-code__spotter_4d5611e5                  43/43    44/75    1/1
        claude-code__spotter_8463c716                  67/67    75/113   12/12
        claude-code__spotter_fa812bfe                  68/68    71/214   8/8
        claude-code__codemie_624a4a58                  34/34    40/119   0/0
        claude-code__spotter_ae4a77f8                  45/45    46/81    3/3
        codex__codemie_rollout_019e1625                10/10    10/166   6/6
        claude-code__spotter_subagent_a2898e3          9/9      58/58    2/2
        claude-code__ccviewer_fe5e1c67_subagent        27/27    29/29    1/1
    Primary paths and errors all fit; paths only seen in tool output get what is left (mean
    recall 0.63). Asserted with some room: primary and errors >= 0.9 per file, all >= 0.5 mean.
    """
    all_recalls = []
    for name in longest_files(RECALL_FILES):
        span = middle_span(corpus_file(name))
        digest = extractive_digest(span)
        tiers: dict[str, int] = {}
        for record in span:
            for path, tier in record_paths(record):
                tiers[path] = min(tier, tiers.get(path, tier))
        errors = {error for record in span for error in record_errors(record)}
        shown = set(listed(digest, "Files", OUTPUT_PATHS))
        primary = [path for path, tier in tiers.items() if tier < TIER_OUTPUT]
        primary_hits = sum(covered(path, shown) for path in primary)
        all_hits = sum(covered(path, shown) for path in tiers)
        shown_errors = listed(digest, "Errors")
        error_hits = sum(any(shows_error_line(item, e) for item in shown_errors) for e in errors)
        with capsys.disabled():
            print(
                f"\n{name:48} primary {primary_hits}/{len(primary)}"
                f"  all {all_hits}/{len(tiers)}  errors {error_hits}/{len(errors)}",
                end="",
            )
        assert primary_hits >= 0.9 * len(primary), name
        assert error_hits >= 0.9 * len(errors), name
        all_recalls.append(all_hits / len(tiers) if tiers else 1.0)
    assert sum(all_recalls) / len(all_recalls) >= 0.5


def test_an_earlier_summary_is_kept_as_such_when_condensing_again() -> None:
    """Condensing a context that already holds a condense summary keeps that summary (up to
    its share) under its own heading, not cut down like a user request."""
    earlier = "Previous work: fixed src/auth.py login bug. " + "Details. " * 200
    records = [
        {"seq": 40, "role": "user", "content": earlier, "type": "marker", "marker": "condense"}
        | {"hides": [3, 30]},
        {"seq": 41, "role": "user", "content": "Now add tests."},
        {"seq": 42, "role": "assistant", "content": "Adding tests for the login flow."},
    ]
    digest = extractive_digest(records)
    assert "Earlier summaries:" in digest
    assert "Previous work: fixed src/auth.py login bug." in digest
    assert len(digest.split("Earlier summaries:")[1].split("User requests:")[0]) > 1000
    users = digest.split("User requests:")[1].split("Assistant notes:")[0]
    assert "Previous work" not in users
    assert "Now add tests." in users
    assert "src/auth.py" in digest.split("Files:")[1]


def test_a_digest_of_a_digest_folds_its_lists_in() -> None:
    """An earlier digest, condensed again: its grouped errors take the new rows in, its $ROOT
    paths come back whole and once, and a long earlier summary is cut to fit, not left out."""
    root = "/home/agent/orders-service"
    first_span = [
        assistant("", tool_call(f"c{n}", "Read", file_path=f"{root}/src/m{n}.py")) for n in range(8)
    ]
    first_span += [result(f"c{n}", f"ValueError: NULL date at row {n * 7}") for n in range(4)]
    first_span += [result(f"c{n}", "ok") for n in range(4, 8)]
    first = extractive_digest(first_span)
    assert f"{ROOT_TOKEN} = " in first
    marker: Record = {"role": "user", "content": "[Summary (16 messages)]\n" + first}
    marker |= {"seq": 20, "type": "marker", "marker": "condense", "hides": [2, 19]}
    earlier: Record = {"role": "user", "content": "Earlier: " + "fixed src/x.py. " * 400}
    earlier |= {"seq": 1, "type": "marker", "marker": "condense", "hides": [1, 1]}
    later = [
        assistant("", tool_call("c9", "Read", file_path=f"{root}/src/m9.py")),
        result("c9", "ValueError: NULL date at row 99"),
    ]
    digest = extractive_digest([earlier, marker, *later], max_chars=2500)
    assert len(digest) <= 2500
    assert listed(digest, "Errors") == ["ValueError: NULL date at row 0, 7, 14, 21, 99"]
    files = listed(digest, "Files")
    assert files == ["src/x.py", *(f"{root}/src/m{n}.py" for n in (*range(8), 9))]
    [kept_earlier, folded] = listed(digest, "Earlier summaries")
    assert kept_earlier.startswith("Earlier: fixed src/x.py.")
    assert CUT_MARK in kept_earlier
    assert folded.startswith("Extractive digest of 16 messages")


def test_the_facts_a_truncation_marker_listed_join_the_digest() -> None:
    """A condense over an earlier truncation marker keeps the user's messages, files and
    errors it listed (and counts the marker as no message)."""
    facts = HiddenFacts()
    facts.add("User requests", "[seq 4] Keep the old date format working.")
    facts.add("Files", "src/dates.py")
    facts.add("Errors", "ValueError: NULL date at row 5")
    content = truncation_text(6, (4, 9), facts, COUNTER, 10_000)
    records = [
        {"type": MARKER_TYPE, "seq": 9, "role": "user", "content": content, "marker": "truncation"},
        {"seq": 10, "role": "user", "content": "Now add a test for it."},
    ]
    digest = extractive_digest(records)
    assert listed(digest, "User requests") == [
        "[seq 4] Keep the old date format working.",
        "[seq 10] Now add a test for it.",
    ]
    assert listed(digest, "Files") == ["src/dates.py"]
    assert listed(digest, "Errors") == ["ValueError: NULL date at row 5"]
    assert digest.startswith("Extractive digest of 1 messages (seq 10-10): 1 user")


@pytest.mark.parametrize(
    "note",
    [
        "[... 1,234 characters elided to fit the context window (seq 57, chars 2,000-3,234) ...]",
        "[... 1,234 characters elided to fit the context window ...]",  # before handles
    ],
)
def test_a_list_cut_by_an_elision_keeps_the_items_after_the_cut(note: str) -> None:
    """The item the cut began in is marked as cut; the items after the cut are still read."""
    text = "\n".join(
        [
            "[Sliding window truncation: 9 messages hidden to reduce context]",
            "Files:",
            "- src/a.py",
            "- src/very/long/pa",
            note,
            "th/b.py",
            "- src/c.py",
            "Errors:",
            "- ValueError: x",
        ]
    )
    assert listed_sections(text) == {
        "Files": ["src/a.py", "src/very/long/pa…", "src/c.py"],
        "Errors": ["ValueError: x"],
    }
