"""The extraction rules of the extractive digest: what a path is, what an error line is, which
paths a tool call acted on, a call's salient argument and outcome, the first sentences of a
text, and the shape by which error lines that differ in one number or id are grouped. Pure.

The rules are public so that callers and tests can measure what a digest kept
(``find_paths``, ``find_error_lines``, ``record_paths``, ``record_errors``; ``shows_error_line``
tells whether a listed error line shows a given one).
"""

import re
from collections.abc import Iterator
from itertools import islice
from typing import Any

from app.formats.parts import RAW_ARGUMENTS_KEY, content_text, parse_arguments
from app.summaries.excerpts import cut_end, normalize

# Where a path was found, best first: what a tool acted on (a path argument, a command), what a
# person or the model wrote, what a tool printed. A smaller tier is kept first when Files is cut.
TIER_ACTED = 0
TIER_MENTIONED = 1
TIER_OUTPUT = 2

# Lengths of excerpts, in characters.
NOTE_MAX = 200
ERROR_MAX = 200
SALIENT_MAX = 100
OUTCOME_MAX = 100
PATH_MAX = 300
# Only the first and last lines of a tool result are searched for errors: a long middle is a
# file's or a document's body, whose "error" words are contents, not what happened.
TOOL_ERROR_WINDOW = 30

_PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file_name")
# Commands, and what a tool was given as text ("input"; arguments that are no JSON object, kept
# verbatim under RAW_ARGUMENTS_KEY): the paths in them are what the tool acted on.
_COMMAND_KEYS = ("command", "cmd", "code", "input", RAW_ARGUMENTS_KEY)
_SALIENT_KEYS = ("pattern", "url", "query", "description", "skill", "message", "thought")

_TOKEN_RE = re.compile(r"[A-Za-z0-9_.~@+/-]+")
_EXTENSION_RE = re.compile(r"[A-Za-z0-9_]\.([A-Za-z][A-Za-z0-9]{0,7})$")
_EXTENSION_WORDS = """
    py pyi ipynb ts tsx js jsx mjs cjs json jsonl md markdown rst txt yaml yml toml ini cfg conf
    env lock log csv tsv xml html htm css scss sass vue svelte ex exs heex eex erl hrl c h cc cpp
    cxx hpp go rs java kt kts scala rb php cs swift m mm sh bash zsh fish ps1 sql graphql proto
    tf tfvars hcl j2 jinja gradle pony lua pl pm cgi r dart zig nim ml mli hs clj elm patch diff
    traj pcap
"""
_KNOWN_EXTENSIONS = frozenset(_EXTENSION_WORDS.split())
_FRAMEWORK_NAME_RE = re.compile(r"^[A-Z][A-Za-z]*\.js$")  # Next.js, Node.js: names, not files
_NOT_BEFORE_PATH = frozenset("}])*$")  # "${DIR}/a.txt" is a fragment, not the path /a.txt

_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b(?:[A-Z]\w*)?(?:Error|Exception)\b[:)\]]"
    r"|(?i:\b(?:error|fatal)(?:\[\w+\])?:)"
    r"|\bFAIL(?:ED)?\b|\bERR!"
    r"|(?i:\bexit(?:ed with)? (?:code|status):? ?[1-9])|(?i:non-zero exit)"
    r"|<tool_use_error>|(?i:command not found|no such file or directory|permission denied)"
    r"|エラー|失敗"
)
# Signs that a tool call itself failed (not just that its output mentions an error).
_FAILED_CALL_RE = re.compile(
    r"Traceback \(most recent call last\)|<tool_use_error>|(?i:non-zero exit)"
    r"|(?i:\bexit(?:ed with)? (?:code|status):? ?[1-9])"
)
_LISTING_RE = re.compile(r"^\s*\d+(?:→|\t)")  # a line of a `cat -n` style file view
_SEARCH_HIT_RE = re.compile(r"^\s*(?:[^\s:]+:)?\d+:(?!\d)")  # a `grep -n` hit: "a.py:12:"
_DIAGNOSTIC_RE = re.compile(r"^\s*\S+?:\d+(?::\d+)?:\s*(?:fatal )?error\b")  # "a.c:3:1: error"
_PROSE_RE = re.compile(r"^\s*(?:[-*+] |#{1,6} |\||> )")  # a Markdown item, heading, table row
_LABEL_ONLY_MAX = 12  # "ERROR:", "Exit code 1": such a line is joined with the next one

_BOILERPLATE_RE = re.compile(
    r"^(?:Chunk ID:|Wall time:|Process exited with code 0|Original token count:|Output:"
    r"|Total output lines:)"
)
_MEANINGFUL_RE = re.compile(r"[^\W_]")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n")  # and CJK stops
_SHELL_WRAPPER_RE = re.compile(r"^(?:ba)?sh -lc (['\"])(.*)\1$", re.DOTALL)


def _bare_name(name: str) -> str | None:
    extension = _EXTENSION_RE.search(name)
    if extension is None or extension.group(1).lower() not in _KNOWN_EXTENSIONS:
        return None
    return None if _FRAMEWORK_NAME_RE.match(name) else name


def _path_candidate(token: str) -> str | None:
    path = token.lstrip("@").rstrip(".-")
    if not 3 <= len(path) <= PATH_MAX or "//" in path or not re.search(r"[A-Za-z]", path):
        return None
    if "/" not in path:
        return _bare_name(path)
    path = path.rstrip("/")
    if _EXTENSION_RE.search(path):
        return path
    rooted = path.startswith(("/", "~/", "./", "../"))
    parts = [part for part in path.split("/") if part not in ("", ".", "..", "~")]
    return path if rooted and len(parts) >= 2 else None


def find_paths(text: str) -> list[str]:
    """File paths in a text, in order of appearance (with repeats).

    A path is a run of path characters with a directory part that either ends in a name with an
    extension or is rooted (``/``, ``~/``, ``./``, ``../``) with two or more parts; or a bare name
    with a well-known file extension (``README.md``). URLs and calls (``res.json(``) are not.
    """
    found = []
    for match in _TOKEN_RE.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end() : match.end() + 1]
        token = match.group()
        if (before == ":" and token.startswith("//")) or after == "(":
            continue  # a URL's rest, a function call
        if before == "*" or (token.startswith("/") and before in _NOT_BEFORE_PATH):
            continue  # a glob, or the tail of "${DIR}/a.txt"
        path = _path_candidate(token)
        if path is not None:
            found.append(path)
    return found


def _is_not_an_event(line: str) -> bool:
    """A numbered file view, a search hit, Markdown prose: contents, not something that happened."""
    if _LISTING_RE.match(line) or _PROSE_RE.match(line):
        return True
    return bool(_SEARCH_HIT_RE.match(line)) and not _DIAGNOSTIC_RE.match(line)


def is_error_line(line: str) -> bool:
    return bool(_ERROR_RE.search(line)) and not _is_not_an_event(line)


def _window(lines: list[str], size: int | None) -> list[str]:
    if size is None or len(lines) <= 2 * size:
        return lines
    return [*lines[:size], *lines[-size:]]


def find_error_lines(text: str, *, window: int | None = None) -> list[str]:
    """Error-like lines of a text, whitespace-collapsed and cut to ``ERROR_MAX`` characters.

    A line is error-like if it shows a traceback, an ``Error:``/``(FooError)``/``Exception:``,
    ``error:``/``fatal:``, FAIL(ED), a non-zero exit code, a tool-use error, "command not found",
    "No such file or directory", "Permission denied", or エラー/失敗. Lines of a numbered file
    view, search hits and Markdown items/headings/table rows are contents or prose, not errors
    (but a compiler diagnostic ``a.c:3:1: error: ...`` is one). A bare label line ("ERROR:") is
    joined with the next non-blank line, which carries the message. With ``window``, only the
    first and last ``window`` lines are searched.
    """
    lines = _window(text.splitlines(), window)
    found = []
    for index, line in enumerate(lines):
        if not is_error_line(line):
            continue
        quoted = normalize(line)
        if len(_MEANINGFUL_RE.findall(quoted)) <= _LABEL_ONLY_MAX:
            following = next((nxt for nxt in lines[index + 1 :] if nxt.strip()), "")
            quoted = normalize(f"{quoted} {following}")
        found.append(cut_end(quoted, ERROR_MAX))
    return found


def record_text(record: dict[str, Any]) -> str:
    """The text of a record's content as the digest reads it: the texts of its text parts (empty
    ones left out), joined by newlines."""
    return content_text(record.get("content"), keep_empty=False)


def _string_values(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _string_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _string_values(item)


def tool_calls(record: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, name, arguments) of each tool call of a record."""
    calls = []
    for call in record.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        name = str(function.get("name") or "tool")
        calls.append((str(call.get("id") or ""), name, parse_arguments(function.get("arguments"))))
    return calls


def _argument_paths(arguments: dict[str, Any]) -> Iterator[tuple[str, int]]:
    for key, value in arguments.items():
        if key in _PATH_KEYS and isinstance(value, str):
            path = value.strip()
            if path and "\n" not in path and len(path) <= PATH_MAX:
                yield path, TIER_ACTED
                continue
        tier = TIER_ACTED if key in _COMMAND_KEYS else TIER_MENTIONED
        for text in _string_values(value):
            for path in find_paths(text):
                yield path, tier


def acted_paths(record: dict[str, Any]) -> list[str]:
    """The paths a record's tool calls acted on (path arguments, paths in commands), in order."""
    return [
        path
        for _, _, arguments in tool_calls(record)
        for path, tier in _argument_paths(arguments)
        if tier == TIER_ACTED
    ]


def record_paths(record: dict[str, Any]) -> list[tuple[str, int]]:
    """(path, tier) for every path a record shows, in order (with repeats)."""
    text_tier = TIER_OUTPUT if record.get("role") == "tool" else TIER_MENTIONED
    found = [(path, text_tier) for path in find_paths(record_text(record))]
    for _, _, arguments in tool_calls(record):
        found.extend(_argument_paths(arguments))
    return found


def record_errors(record: dict[str, Any]) -> list[str]:
    """The error-like lines of a record's content (tool results: their first and last lines)."""
    role = record.get("role")
    if role == "system":
        return []
    window = TOOL_ERROR_WINDOW if role == "tool" else None
    return find_error_lines(record_text(record), window=window)


# Numbers and ids: hexadecimal (with a digit), UUIDs, decimals ("12", "3.5", "1.2.3").
_VALUE_RE = re.compile(
    r"\b(?:0x[0-9a-fA-F]+|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
    r"|(?=[a-f]*\d)[0-9a-f]{7,40}|\d+(?:\.\d+)*)\b"
)
_MORE_VALUES_RE = re.compile(r" \((\d+) more\)")


def error_shape(line: str) -> tuple[list[str], list[str]]:
    """A line's constant pieces and the numbers/ids between them (one more piece than values)."""
    pieces, values, start = [], [], 0
    for match in _VALUE_RE.finditer(line):
        pieces.append(line[start : match.start()])
        values.append(match.group())
        start = match.end()
    pieces.append(line[start:])
    return pieces, values


def shows_error_line(item: str, line: str) -> bool:
    """Whether a digest's error item shows this error line: the line itself, or the line of a
    group that lists the line's value among others ("row 5, 28, 51 (3 more)")."""
    if item == line:
        return True
    pieces, values = error_shape(line)
    for slot in range(len(values)):
        pattern = "".join(
            re.escape(piece) + ("(.+)" if index == slot else re.escape(values[index]))
            for index, piece in enumerate(pieces[:-1])
        )
        match = re.fullmatch(pattern + re.escape(pieces[-1]), item)
        if match and values[slot] in _MORE_VALUES_RE.sub("", match.group(1)).split(", "):
            return True
    return False


def _first_string(arguments: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((str(arguments[key]) for key in keys if isinstance(arguments.get(key), str)), "")


def _first_scalar(arguments: dict[str, Any]) -> str:
    for key, value in arguments.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value):
            return f"{key}={value}"
    return ""


def _command_excerpt(command: str) -> str:
    wrapped = _SHELL_WRAPPER_RE.match(command.strip())
    return first_line(wrapped.group(2) if wrapped else command)


def salient_argument(arguments: dict[str, Any]) -> str:
    """The argument that says what a call did: a path, a command, a pattern, a URL..."""
    path = _first_string(arguments, _PATH_KEYS)
    command = _first_string(arguments, _COMMAND_KEYS)
    pattern = arguments.get("pattern")
    if path and re.fullmatch(r"\w+", command):
        value = f"{command} {path}"  # an editor's sub-command: "view /a.py"
    elif path and isinstance(pattern, str):
        value = f"{pattern} in {path}"
    else:
        value = path or _command_excerpt(command)
    value = value or _first_string(arguments, _SALIENT_KEYS) or _first_scalar(arguments)
    return cut_end(normalize(value), SALIENT_MAX)


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def meaningful_lines(text: str) -> Iterator[str]:
    """Lines of a tool result that say something (not blank, not a harness header)."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and _MEANINGFUL_RE.search(stripped) and not _BOILERPLATE_RE.match(stripped):
            yield stripped


def tool_outcome(text: str) -> str:
    """ "error: <first error line>" if the call failed, else "ok: <first meaningful line>".

    A call failed if one of its first three meaningful lines is error-like, or its result shows a
    traceback, a non-zero exit code or a tool-use error.
    """
    head = list(islice(meaningful_lines(text), 3))
    window = "\n".join(_window(text.splitlines(), TOOL_ERROR_WINDOW))
    if any(is_error_line(line) for line in head) or _FAILED_CALL_RE.search(window):
        errors = find_error_lines(text, window=TOOL_ERROR_WINDOW)
        return "error: " + cut_end(errors[0] if errors else normalize(head[0]), OUTCOME_MAX)
    if not head:
        return "ok (empty)"
    if _LISTING_RE.match(head[0]):
        return f"ok: {len(text.splitlines())} lines of a file view"
    return "ok: " + cut_end(normalize(head[0]), OUTCOME_MAX)


def first_sentences(text: str) -> str:
    """The first sentence of a text, and the second too when the first is short."""
    parts = [normalize(part) for part in _SENTENCE_END_RE.split(text.strip())]
    parts = [part for part in parts if part]
    if not parts:
        return ""
    note = parts[0]
    if len(note) < 60 and len(parts) > 1:
        note = f"{note} {parts[1]}"
    return cut_end(note, NOTE_MAX)
