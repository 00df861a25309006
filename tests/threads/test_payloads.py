"""Issue 6's acceptance for thread payloads (SPEC §8, seed 003), and the per-thread plumbing.

A thread's payloads, in every format, stay within the thread's share and the task's window and
always carry the parent's latest exchange ahead of the thread's own messages: as messages arrive,
after the condense job that appends schedule, after POST /compress (condense and truncate) and
after GET /request's own fit. The thread's compactions land in its own files only; the root's
context does not move.

The root holds a real conversation (a corpus trajectory with parallel tool calls); threads get
synthetic turns (user request, assistant tool calls, tool results of varied sizes, assistant
answer), every text tagged ``[<tag>]`` so the thread's own messages can be told apart in any
format. Counts are exact (o200k_base); the summariser is the default extractive one.
"""

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.formats import FORMATS
from app.formats.parts import content_text, stand_in
from app.tokens.counters import TextCounter, counter_for
from tests.support.app import running_app
from tests.support.corpus import corpus_messages
from tests.support.errors import assert_error
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.formats import adjustment, validate_payload
from tests.support.payloads import context_view
from tests.support.settings import fast_settings
from tests.support.tasks import all_messages, create_task, post_messages
from tests.support.threads import start
from tests.support.waits import settled_jobs

WINDOW = 12_000
MAX_OUTPUT = 500
BUDGET = int(WINDOW * 0.9) - MAX_OUTPUT  # the task's whole budget (CONTEXT_BUFFER 0.1)
CHILD_BUDGET = int(BUDGET * 0.8)  # a thread's own share at the default ratio
GRANDCHILD_BUDGET = int(CHILD_BUDGET * 0.8)
# What each context above a thread keeps of its payload: its own share less its child's.
ROOT_SHARE = BUDGET - CHILD_BUDGET
CHILD_SHARE = CHILD_BUDGET - GRANDCHILD_BUDGET
ROOT_CONVERSATION = "claude-code__ccviewer_fe5e1c67_main.jsonl"
TURNS_BOUND = 40  # turns posted while waiting for a compaction: far more than one needs
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name, description in (("read_file", "Read a file."), ("run_tests", "Run a test file."))
]

# These tests follow a thread through condense, truncation and elision: without masking,
# which tests/compaction/test_mask.py covers (a thread's context is masked like any other).
NO_MASK = ("condense", "truncate", "elide")


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return fast_settings(context_dir, token_counter="auto", compaction={"tiers": NO_MASK})


@pytest.fixture(scope="module")
def counter() -> TextCounter:
    counter = counter_for("gpt-4o", "auto")
    assert counter.name == "o200k_base"
    return counter


# -- conversations ----------------------------------------------------------------------------


def latest_exchange(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """The texts of the last user message and the last assistant message that have text."""
    texts = {
        role: [
            content_text(m["content"], non_text=stand_in)
            for m in messages
            if m["role"] == role and m["content"]
        ]
        for role in ("user", "assistant")
    }
    return texts["user"][-1], texts["assistant"][-1]


def turn(tag: str, number: int, lines: int | None = None) -> list[dict[str, Any]]:
    """One exchange of a thread: a request, one or two tool calls (parallel on odd turns) with
    their results, an answer; results of 8 to 18 lines (under the message cap of the
    smallest share here) unless ``lines`` says."""
    size = lines if lines is not None else 8 + (number * 5) % 11
    calls = [
        {
            "id": f"call_{tag}_{number}_{k}",
            "type": "function",
            "function": {
                "name": ("read_file", "run_tests")[k],
                "arguments": json.dumps({"path": f"src/{tag}/module_{number}.py"}),
            },
        }
        for k in range(1 + number % 2)
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": "\n".join(
                f"[{tag}] src/{tag}/module_{number}.py:{line}: def helper_{line}(value): "
                f"return value * {line} + {k}"
                for line in range(size)
            ),
        }
        for k, call in enumerate(calls)
    ]
    return [
        {"role": "user", "content": f"[{tag}] request {number}: fix module_{number} and test it"},
        {
            "role": "assistant",
            "content": f"[{tag}] reading module_{number} first" if number % 3 else "",
            "tool_calls": calls,
        },
        *results,
        {"role": "assistant", "content": f"[{tag}] module_{number} is fixed and its tests pass"},
    ]


async def root_task(client: httpx.AsyncClient) -> tuple[str, tuple[str, str]]:
    """A task whose root holds the corpus conversation; its uuid and the root's latest
    exchange."""
    created = await create_task(
        client,
        context_length=WINDOW,
        max_output_tokens=MAX_OUTPUT,
        system_prompt="You are a coding agent.",
        tools=TOOLS,
    )
    conversation = corpus_messages(ROOT_CONVERSATION)
    await post_messages(client, created["uuid"], {"messages": conversation})
    return created["uuid"], latest_exchange(conversation)


# -- reading payloads -------------------------------------------------------------------------


def texts(name: str, payload: dict[str, Any]) -> list[str]:
    """Every piece of text of a payload (contents, call arguments, results), in the order the
    model reads them."""
    if name != "anthropic":
        pieces = []
        for message in payload["messages"]:
            pieces.append(content_text(message.get("content"), non_text=stand_in))
            pieces += [
                json.dumps(c["function"]["arguments"]) for c in message.get("tool_calls") or ()
            ]
        return pieces
    pieces = [block["text"] for block in payload.get("system") or ()]
    for message in payload["messages"]:
        for block in message["content"]:
            if block["type"] == "text":
                pieces.append(block["text"])
            elif block["type"] == "tool_use":
                pieces.append(json.dumps(block["input"]))
            elif block["type"] == "tool_result":
                content = block.get("content") or ""
                pieces.append(content_text(content, non_text=stand_in))
    return pieces


@dataclass(frozen=True)
class View:
    """A thread as its payloads are checked."""

    uuid: str
    thread_id: int
    tag: str  # in every text of its own messages
    budget: int  # its own share of the task's budget
    # (context, its latest (user, assistant) texts, its protected share), root first
    ancestors: list[tuple[int, tuple[str, str], int]]


def assert_order(name: str, payload: dict[str, Any], view: View) -> None:
    """Each ancestor's latest exchange is there, root first, all before the thread's own."""
    pieces = texts(name, payload)
    own = [i for i, text in enumerate(pieces) if f"[{view.tag}]" in text]
    own_start = own[0] if own else len(pieces)
    previous = -1
    for _, exchange, _ in view.ancestors:
        for text in exchange:
            found = [i for i, piece in enumerate(pieces) if text in piece]
            assert found, (name, "missing from the payload", text[:80])
            assert previous < found[0], (name, "out of order", text[:80])
            assert found[-1] < own_start, (name, "after the thread's own messages", text[:80])
            previous = found[0]


HEADERS = ("Context-Tokens", "Context-Budget", "Thread-Tokens", "Thread-Budget", "Protected-Tokens")


async def check_payloads(
    client: httpx.AsyncClient, view: View, counter: TextCounter
) -> dict[str, httpx.Response]:
    """Fetch the thread's payload in every format and check every promise; the answers."""
    answers = {}
    for name, payload_format in FORMATS.items():
        response = await client.get(
            f"/tasks/{view.uuid}/request", params={"thread_id": view.thread_id, "format": name}
        )
        assert response.status_code == 200, (name, response.text[:2000])
        headers = {k: int(response.headers[f"X-{k}"]) for k in HEADERS}
        assert headers["Thread-Budget"] == view.budget, (name, headers)
        assert headers["Context-Budget"] == BUDGET, (name, headers)
        assert headers["Thread-Tokens"] <= headers["Thread-Budget"], (name, headers)
        total = headers["Thread-Tokens"] + headers["Protected-Tokens"]
        assert headers["Context-Tokens"] == total <= headers["Context-Budget"], (name, headers)
        assert response.headers["X-Token-Counter"] == counter.name
        payload = response.json()
        validate_payload(name, payload)
        recount = payload_format.payload_tokens(counter, payload)
        assert recount <= headers["Context-Tokens"], (name, recount, headers)
        assert_order(name, payload, view)
        answers[name] = response
    if await check_protected(client, view, answers["openai"]):
        # Sums hold for one context: not when a background compaction changed it meanwhile.
        again = await client.get(
            f"/tasks/{view.uuid}/request", params={"thread_id": view.thread_id, "format": "openai"}
        )
        if again.json()["messages"] == answers["openai"].json()["messages"]:
            assert_exact_counts(answers, counter)
    return answers


async def check_protected(client: httpx.AsyncClient, view: View, openai: httpx.Response) -> bool:
    """GET /context's protected entries are the OpenAI payload's first messages, root first,
    each ancestor's within its share, counted as the headers say; the thread's own come right
    after them. True if the thread's own messages hold no anchor (whose stored cost is the
    most a rendering may cost, so that sums are upper bounds)."""
    context = await context_view(client, view.uuid, view.thread_id, fmt=None)
    protected = context["protected"]
    order = [thread_id for thread_id, _, _ in view.ancestors]
    sources = [entry["thread_id"] for entry in protected]
    assert sources == sorted(sources, key=order.index), sources
    for thread_id, _, share in view.ancestors:
        assert sum(e["tokens"] for e in protected if e["thread_id"] == thread_id) <= share
    assert context["protected_tokens"] == sum(e["tokens"] for e in protected)
    assert int(openai.headers["X-Protected-Tokens"]) == context["protected_tokens"]
    payload = openai.json()
    assert payload["messages"][: len(protected)] == [e["message"] for e in protected]
    own = payload["messages"][len(protected) :]
    assert all(
        f"[{view.tag}]" not in content_text(e["message"]["content"], non_text=stand_in)
        for e in protected
    )
    if own:
        assert f"[{view.tag}]" in content_text(own[0]["content"], non_text=stand_in), own[0]
    return not any(m["role"] == "system" and m["content"].startswith("[Thread") for m in own)


def assert_exact_counts(answers: dict[str, httpx.Response], counter: TextCounter) -> None:
    """Each payload counts what X-Context-Tokens says, less its format's documented gaps."""
    messages = answers["openai"].json()["messages"]
    for name, response in answers.items():
        exact = FORMATS[name].payload_tokens(counter, response.json())
        served = int(response.headers["X-Context-Tokens"])
        gaps = adjustment(name, counter, messages, keep_ids=True)
        assert served - gaps == exact, (name, served, exact)


# -- compactions ------------------------------------------------------------------------------


def context_files(tdir: Path, thread_id: int) -> Path:
    return tdir / "threads" / str(thread_id) if thread_id else tdir


def file_bytes(directory: Path) -> dict[str, bytes]:
    """A context's own files (its threads' directories left out)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def marker_kinds(directory: Path) -> list[str]:
    return [r["marker"] for r in read_jsonl(directory / "messages.jsonl") if "marker" in r]


async def summaries(client: httpx.AsyncClient, uuid: str, thread_id: int) -> list[dict[str, Any]]:
    response = await client.get(f"/tasks/{uuid}/summaries", params={"thread_id": thread_id})
    assert response.status_code == 200, response.text
    records: list[dict[str, Any]] = response.json()["summaries"]
    return records


async def assert_compactions_are_the_threads(
    client: httpx.AsyncClient, tdir: Path, view: View, kinds: set[str]
) -> None:
    """The thread's compactions are in its own files and GET /summaries?thread_id, of
    ``kinds`` (each at least once)."""
    directory = context_files(tdir, view.thread_id)
    records = await summaries(client, view.uuid, view.thread_id)
    assert records == read_jsonl(directory / "summaries.jsonl")
    assert {r["kind"] for r in records} == kinds
    assert sorted(marker_kinds(directory)) == sorted(r["kind"] for r in records)


async def assert_root_never_compacted(client: httpx.AsyncClient, tdir: Path, uuid: str) -> None:
    assert await summaries(client, uuid, 0) == []
    assert not (tdir / "summaries.jsonl").exists()
    assert marker_kinds(tdir) == []


async def root_context(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    return await context_view(client, uuid, 0, fmt=None)


def own_messages(context: dict[str, Any]) -> list[dict[str, Any]]:
    """A context view's messages but the anchors of its threads."""
    return [
        m for m in context["messages"] if not str(m["message"]["content"]).startswith("[Thread: ")
    ]


async def post_until_condensed(
    client: httpx.AsyncClient, view: View, counter: TextCounter, first: int
) -> int:
    """Post turns to the thread, checking its payloads after each, until the condense job an
    append scheduled has condensed it; the root's context meanwhile is untouched by that job.
    Returns the next turn number."""
    for number in range(first, first + TURNS_BOUND):
        result = await post_messages(
            client, view.uuid, {"messages": turn(view.tag, number)}, view.thread_id
        )
        if not result["compaction_scheduled"]:
            await check_payloads(client, view, counter)
            continue
        before = await root_context(client, view.uuid)
        jobs = await settled_jobs(client, view.uuid, "condense")
        # The root's own messages are untouched (its anchor of the thread shows the thread's
        # latest exchanges as they are now).
        assert own_messages(await root_context(client, view.uuid)) == own_messages(before)
        await check_payloads(client, view, counter)
        done = [
            j
            for j in jobs
            if j["thread_id"] == view.thread_id and (j["result"] or {}).get("kind") == "condense"
        ]
        if done:
            assert all(j["thread_id"] != 0 for j in jobs), jobs
            ids = [r["id"] for r in await summaries(client, view.uuid, view.thread_id)]
            assert done[0]["result"]["summary_id"] in ids
            return number + 1
    raise AssertionError("no condense job condensed the thread")


async def compress(
    client: httpx.AsyncClient, view: View, counter: TextCounter, strategy: str
) -> dict[str, Any]:
    """POST /compress?thread_id; the root's context is the same before and after, and the
    thread's payloads keep their promises."""
    before = await root_context(client, view.uuid)
    response = await client.post(
        f"/tasks/{view.uuid}/compress",
        params={"thread_id": view.thread_id},
        json={"strategy": strategy},
    )
    assert response.status_code == 200, response.text
    outcome: dict[str, Any] = response.json()
    assert outcome["tokens_after"] < outcome["tokens_before"], outcome
    assert await root_context(client, view.uuid) == before
    await check_payloads(client, view, counter)
    return outcome


async def drive(client: httpx.AsyncClient, tdir: Path, view: View, counter: TextCounter) -> None:
    """Take a thread through its three kinds of compaction, checking its payloads all along."""
    await check_payloads(client, view, counter)  # before any message: the regions alone
    number = await post_until_condensed(client, view, counter, 0)
    await assert_compactions_are_the_threads(client, tdir, view, {"condense"})
    # Two small turns give a condense enough to summarise again; one more, truncation a span.
    for strategy, kind, turns in (("condense", "condense", 2), ("truncate", "truncation", 1)):
        for _ in range(turns):
            await post_messages(
                client, view.uuid, {"messages": turn(view.tag, number, lines=4)}, view.thread_id
            )
            await check_payloads(client, view, counter)
            number += 1
        await settled_jobs(client, view.uuid, "condense", at_least_one=False)
        assert (await compress(client, view, counter, strategy))["kind"] == kind
    await assert_compactions_are_the_threads(client, tdir, view, {"condense", "truncation"})


# -- the acceptance ---------------------------------------------------------------------------


async def test_thread_payloads_keep_their_window_and_the_parents_latest_exchange(
    client: httpx.AsyncClient, context_dir: Path, counter: TextCounter
) -> None:
    uuid, root_latest = await root_task(client)
    tdir = task_dir(context_dir, uuid)
    child = await start(client, uuid, label="build")
    child_view = View(
        uuid, child["thread_id"], "child", CHILD_BUDGET, [(0, root_latest, ROOT_SHARE)]
    )
    root_files = file_bytes(tdir)
    await drive(client, tdir, child_view, counter)
    assert file_bytes(tdir) == root_files
    await assert_root_never_compacted(client, tdir, uuid)

    # A second level: the child hands work to a grandchild; both ancestors' latest exchanges
    # stay in the grandchild's payloads, and its compactions touch neither of them.
    child_latest = (
        "[child] please hand the parser rewrite to a helper thread",
        "[child] starting a helper thread for the parser rewrite",
    )
    await post_messages(
        client,
        uuid,
        {
            "messages": [
                {"role": "user", "content": child_latest[0]},
                {"role": "assistant", "content": child_latest[1]},
            ]
        },
        child_view.thread_id,
    )
    await settled_jobs(client, uuid, "condense")
    grandchild = await start(client, uuid, parent_thread_id=child_view.thread_id, label="parser")
    grandchild_view = View(
        uuid,
        grandchild["thread_id"],
        "grandchild",
        GRANDCHILD_BUDGET,
        [(0, root_latest, ROOT_SHARE), (child_view.thread_id, child_latest, CHILD_SHARE)],
    )
    root_before = await root_context(client, uuid)
    root_files = file_bytes(tdir)
    child_files = file_bytes(context_files(tdir, child_view.thread_id))
    await drive(client, tdir, grandchild_view, counter)
    assert await root_context(client, uuid) == root_before
    assert file_bytes(tdir) == root_files
    assert file_bytes(context_files(tdir, child_view.thread_id)) == child_files
    await assert_root_never_compacted(client, tdir, uuid)
    # The child's own payloads, its grandchild's anchor now in them, still keep their promises.
    await check_payloads(client, child_view, counter)


async def test_get_request_fits_a_thread_over_its_share_by_itself(
    context_dir: Path, counter: TextCounter
) -> None:
    """With condensing out of reach (MIN_TO_COMPRESS above any span), only GET /request's own
    fit can bring the thread under its share: it truncates, and elides a message larger than
    the whole share."""
    settings = fast_settings(
        context_dir, token_counter="auto", compaction={"min_to_compress": 1000, "tiers": NO_MASK}
    )
    async with running_app(settings) as client:
        uuid, root_latest = await root_task(client)
        tdir = task_dir(context_dir, uuid)
        view = View(
            uuid,
            (await start(client, uuid))["thread_id"],
            "t",
            CHILD_BUDGET,
            [(0, root_latest, ROOT_SHARE)],
        )
        await post_messages(
            client, uuid, {"messages": [m for n in range(20) for m in turn("t", n)]}, view.thread_id
        )
        jobs = await settled_jobs(client, uuid, "condense")
        assert [j["status"] for j in jobs] == ["skipped"], jobs  # too few to summarise
        context = await context_view(client, uuid, view.thread_id, fmt=None)
        assert context["tokens"] > CHILD_BUDGET, context["tokens"]
        assert context["next_action"] == "over_budget"
        root_before = await root_context(client, uuid)
        root_files = file_bytes(tdir)
        await check_payloads(client, view, counter)
        await assert_compactions_are_the_threads(client, tdir, view, {"truncation"})
        assert await root_context(client, uuid) == root_before
        assert file_bytes(tdir) == root_files

        # A first message larger than the whole share: only eliding its middle fits it.
        huge = View(
            uuid, (await start(client, uuid))["thread_id"], "huge", CHILD_BUDGET, view.ancestors
        )
        log = "\n".join(
            f"[huge] log line {i}: worker {i % 7} retried request {i}" for i in range(2500)
        )
        await post_messages(
            client, uuid, {"messages": [{"role": "user", "content": log}]}, huge.thread_id
        )
        root_before = await root_context(client, uuid)
        root_files = file_bytes(tdir)
        await check_payloads(client, huge, counter)
        await assert_compactions_are_the_threads(client, tdir, huge, {"elision"})
        assert await root_context(client, uuid) == root_before
        assert file_bytes(tdir) == root_files
        await assert_root_never_compacted(client, tdir, uuid)
        # the first thread's compactions are still its own
        await assert_compactions_are_the_threads(client, tdir, view, {"truncation"})


async def test_the_parents_newest_exchange_reaches_the_thread_but_not_its_open_calls(
    client: httpx.AsyncClient, counter: TextCounter
) -> None:
    """The parent goes on while its thread works: the thread's next payloads carry the parent's
    newest exchange; an assistant message of the parent whose calls wait for results stays out
    (nothing may come between calls and results) until they are in."""
    uuid, _ = await root_task(client)
    thread_id = (await start(client, uuid))["thread_id"]
    await post_messages(client, uuid, {"messages": turn("t", 0)}, thread_id)
    newest = ("Also keep the public API unchanged.", "Noted: the public API stays as it is.")
    await post_messages(client, uuid, {"messages": [{"role": "user", "content": newest[0]}]})
    await post_messages(client, uuid, {"messages": [{"role": "assistant", "content": newest[1]}]})
    view = View(uuid, thread_id, "t", CHILD_BUDGET, [(0, newest, ROOT_SHARE)])
    await check_payloads(client, view, counter)

    calls = turn("root", 1)[1:2]  # the root's assistant calls tools; no results yet
    await post_messages(client, uuid, {"messages": calls})
    await post_messages(client, uuid, {"messages": turn("t", 1)}, thread_id)
    answers = await check_payloads(client, view, counter)
    assert "[root]" not in answers["openai"].text
    await post_messages(client, uuid, {"messages": turn("root", 1)[2:-1]})  # the results
    answers = await check_payloads(client, view, counter)
    assert '"call_root_1_1"' in answers["openai"].text


REQUEST = "Fix the flaky worker; the failing log follows."
REPLY = "I will investigate the worker in a thread."
LOG = "\n".join(f"line {i}: worker {i % 7} failed to reach db-{i % 3}" for i in range(250))
LOG_CALL = {
    "id": "call_log",
    "type": "function",
    "function": {"name": "read_file", "arguments": '{"path": "worker.log"}'},
}
LARGE_LATEST: dict[str, list[dict[str, Any]]] = {
    # the user pastes the log into the request
    "pasted": [
        {"role": "user", "content": REQUEST + "\n" + LOG},
        {"role": "assistant", "content": REPLY},
    ],
    # the agent reads the log between the request and its answer
    "read": [
        {"role": "user", "content": REQUEST},
        {"role": "assistant", "content": "", "tool_calls": [LOG_CALL]},
        {"role": "tool", "tool_call_id": "call_log", "content": LOG},
        {"role": "assistant", "content": REPLY},
    ],
}


@pytest.mark.parametrize("case", sorted(LARGE_LATEST))
async def test_a_parents_latest_exchange_survives_a_unit_larger_than_its_share(
    client: httpx.AsyncClient, counter: TextCounter, case: str
) -> None:
    """More than the root's whole protected share (ROOT_SHARE) sits in its latest exchange:
    the thread must still see the request (its beginning at least) and the answer, or it works
    without knowing what it was asked, seed 003's problem 2 ("the original conversation with
    the user is forgotten")."""
    created = await create_task(
        client, context_length=WINDOW, max_output_tokens=MAX_OUTPUT, system_prompt="Agent."
    )
    uuid = created["uuid"]
    await post_messages(client, uuid, {"messages": LARGE_LATEST[case]})
    thread_id = (await start(client, uuid))["thread_id"]
    await post_messages(client, uuid, {"messages": turn("t", 0)}, thread_id)
    view = View(uuid, thread_id, "t", CHILD_BUDGET, [(0, (REQUEST, REPLY), ROOT_SHARE)])
    await check_payloads(client, view, counter)


# -- plumbing ---------------------------------------------------------------------------------


async def short_task(client: httpx.AsyncClient) -> str:
    """A task whose root has its system prompt and one exchange."""
    created = await create_task(client, system_prompt="You are a coding agent.")
    exchange = [
        {"role": "user", "content": "Fix the crash in parser.py."},
        {"role": "assistant", "content": "I will start a thread for it."},
    ]
    await post_messages(client, created["uuid"], {"messages": exchange})
    uuid: str = created["uuid"]
    return uuid


def posted(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records as posted: the service's envelope fields left out."""
    envelope = {"seq", "timestamp", "tokens", "format_tokens", "batch_size", "tool_name"}
    return [{k: v for k, v in r.items() if k not in envelope} for r in records]


async def test_a_threads_history_is_its_own_and_counted_in_the_tasks(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await short_task(client)
    root_before = await all_messages(client, uuid, 0, limit=3)
    child = (await start(client, uuid))["thread_id"]
    sent = turn("child", 1) + turn("child", 2)
    await post_messages(client, uuid, {"messages": sent[:3]}, child)
    for message in sent[3:]:
        await post_messages(client, uuid, {"messages": [message]}, child)
    records = await all_messages(client, uuid, child, limit=3)
    assert [r["seq"] for r in records] == list(range(1, len(sent) + 1))
    assert posted(records) == sent
    root = await all_messages(client, uuid, 0, limit=3)
    assert root[:-1] == root_before  # the root took the anchor only
    assert root[-1]["seq"] == root_before[-1]["seq"] + 1
    assert root[-1]["content"] == f"[Thread (#{child}) started]"

    grandchild = (await start(client, uuid, parent_thread_id=child))["thread_id"]
    await post_messages(client, uuid, {"messages": turn("grandchild", 1)}, grandchild)
    response = await client.post(
        f"/tasks/{uuid}/compress", params={"thread_id": child}, json={"strategy": "truncate"}
    )
    assert response.json()["kind"] == "truncation", response.text  # a marker: not a message
    tdir = task_dir(context_dir, uuid)
    counts = {
        thread_id: len(
            [
                r
                for r in read_jsonl(context_files(tdir, thread_id) / "messages.jsonl")
                if "marker" not in r
            ]
        )
        for thread_id in (0, child, grandchild)
    }
    assert counts == {0: len(root), child: len(sent) + 1, grandchild: len(turn("grandchild", 1))}
    task = (await client.get(f"/tasks/{uuid}")).json()
    assert task["statistics"]["total_messages"] == sum(counts.values())
    tree = (await client.get(f"/tasks/{uuid}/threads")).json()
    nested = tree["children"][0]
    assert tree["message_count"] == counts[0]
    assert nested["message_count"] == counts[child]
    assert nested["children"][0]["message_count"] == counts[grandchild]


CONTEXT_CALLS = (
    ("POST", "messages", {"role": "user", "content": "hello"}),
    ("GET", "messages", None),
    ("GET", "context", None),
    ("GET", "request", None),
    ("POST", "compress", {"strategy": "truncate"}),
    ("POST", "rewind", {"to_seq": 1}),
    ("GET", "summaries", None),
)


async def call(
    client: httpx.AsyncClient, uuid: str, call: tuple[str, str, Any], thread_id: Any
) -> httpx.Response:
    method, path, body = call
    return await client.request(
        method, f"/tasks/{uuid}/{path}", params={"thread_id": thread_id}, json=body
    )


async def test_an_unknown_thread_is_404_on_every_context_endpoint(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await short_task(client)
    other = await short_task(client)
    await start(client, other)  # thread 1 of another task is no thread of this one
    before = snapshot_dir(context_dir)
    for thread_id in (1, 7, 2**31 - 1):
        for endpoint in CONTEXT_CALLS:
            response = await call(client, uuid, endpoint, thread_id)
            details = assert_error(response, 404, "thread_not_found")
            assert details["thread_id"] == thread_id, (endpoint, details)
        for action in ("end", "abort"):
            response = await client.post(f"/tasks/{uuid}/threads/{thread_id}/{action}", json={})
            assert assert_error(response, 404, "thread_not_found")["thread_id"] == thread_id
    assert snapshot_dir(context_dir) == before


@pytest.mark.parametrize("thread_id", [-1, "x", 2**31])
async def test_a_thread_id_out_of_range_is_422(
    client: httpx.AsyncClient, context_dir: Path, thread_id: Any
) -> None:
    uuid = await short_task(client)
    await start(client, uuid)
    before = snapshot_dir(context_dir)
    for endpoint in CONTEXT_CALLS:
        assert_error(await call(client, uuid, endpoint, thread_id), 422, "validation_error")
    assert snapshot_dir(context_dir) == before


async def test_an_ended_thread_takes_no_messages_and_no_compactions(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await short_task(client)
    thread_id = (await start(client, uuid))["thread_id"]
    await post_messages(client, uuid, {"messages": turn("t", 1)}, thread_id)
    response = await client.post(
        f"/tasks/{uuid}/threads/{thread_id}/end", json={"generate_chronicle": False}
    )
    assert response.status_code == 200, response.text
    before = snapshot_dir(context_dir)
    for endpoint in CONTEXT_CALLS:
        if endpoint[0] == "POST":
            response = await call(client, uuid, endpoint, thread_id)
            assert_error(response, 409, "thread_not_active")
    response = await client.post(
        f"/tasks/{uuid}/messages",
        params={"thread_id": thread_id},
        json={"role": "user", "content": "one more"},
        headers={"Idempotency-Key": "late"},
    )
    assert assert_error(response, 409, "thread_not_active")["status"] == "completed"
    assert snapshot_dir(context_dir) == before


async def test_concurrent_appends_to_a_thread_and_the_root_get_every_seq_once(
    client: httpx.AsyncClient,
) -> None:
    uuid = await short_task(client)
    thread_id = (await start(client, uuid))["thread_id"]
    root_last = (await all_messages(client, uuid, 0, limit=3))[-1]["seq"]

    async def one(context: int, number: int) -> list[int]:
        message = {"role": "user", "content": f"context {context} message {number}"}
        result = await post_messages(client, uuid, {"messages": [message]}, context)
        seqs: list[int] = result["seqs"]
        return seqs

    results = await asyncio.gather(
        *(one(context, n) for n in range(20) for context in (0, thread_id))
    )
    thread_seqs = sorted(s for i, r in enumerate(results) if i % 2 for s in r)
    root_seqs = sorted(s for i, r in enumerate(results) if not i % 2 for s in r)
    assert thread_seqs == list(range(1, 21))
    assert root_seqs == list(range(root_last + 1, root_last + 21))
    for context, first in ((thread_id, 1), (0, root_last + 1)):
        records = [
            r for r in await all_messages(client, uuid, context, limit=3) if r["seq"] >= first
        ]
        assert [r["seq"] for r in records] == list(range(first, first + 20))
        assert sorted(r["content"] for r in records) == sorted(
            f"context {context} message {n}" for n in range(20)
        )


async def test_an_idempotency_key_is_per_context(client: httpx.AsyncClient) -> None:
    uuid = await short_task(client)
    thread_id = (await start(client, uuid))["thread_id"]
    message = {"role": "user", "content": "run the tests"}
    key = {"Idempotency-Key": "step-7"}

    async def send(context: int) -> httpx.Response:
        return await client.post(
            f"/tasks/{uuid}/messages", params={"thread_id": context}, json=message, headers=key
        )

    root_first = await send(0)
    thread_first = await send(thread_id)
    assert root_first.status_code == thread_first.status_code == 201, thread_first.text
    assert "Idempotent-Replayed" not in thread_first.headers  # not the root's answer
    assert thread_first.json()["seqs"] == [1]
    root_last = root_first.json()["seqs"][0]
    for context, first in ((thread_id, thread_first), (0, root_first)):
        again = await send(context)
        assert again.status_code == 201, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
    assert [r["seq"] for r in await all_messages(client, uuid, thread_id, limit=3)] == [1]
    assert (await all_messages(client, uuid, 0, limit=3))[-1]["seq"] == root_last


async def test_a_thread_cannot_start_between_calls_and_their_results(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = await short_task(client)
    child = (await start(client, uuid))["thread_id"]
    waiting = turn("w", 1)[:2]  # a request, then the assistant's calls: no results yet
    for parent in (0, child):
        await post_messages(client, uuid, {"messages": waiting}, parent)
        before = snapshot_dir(context_dir)
        tree = (await client.get(f"/tasks/{uuid}/threads")).json()
        response = await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": parent})
        details = assert_error(response, 409, "tool_results_pending")
        assert details["open"] == ["call_w_1_0", "call_w_1_1"]
        assert snapshot_dir(context_dir) == before
        assert (await client.get(f"/tasks/{uuid}/threads")).json() == tree
        await post_messages(
            client, uuid, {"messages": turn("w", 1)[2:]}, parent
        )  # the results: now it may start
        await start(client, uuid, parent_thread_id=parent)


async def test_a_restart_keeps_a_threads_context_byte_identical(
    settings: Settings, counter: TextCounter
) -> None:
    """Close the app and open another on the same settings: each thread's payloads (in every
    format) and /context are the same bytes, a grandchild's and its compacted parent's."""
    async with running_app(settings) as client:
        uuid, root_latest = await root_task(client)
        child_id = (await start(client, uuid))["thread_id"]
        child = View(uuid, child_id, "child", CHILD_BUDGET, [(0, root_latest, ROOT_SHARE)])
        for number in range(4):
            await post_messages(client, uuid, {"messages": turn("child", number)}, child_id)
        outcome = await client.post(
            f"/tasks/{uuid}/compress", params={"thread_id": child_id}, json={}
        )
        assert outcome.json()["kind"] == "condense", outcome.text
        await post_messages(client, uuid, {"messages": turn("child", 4)}, child_id)
        grandchild_id = (await start(client, uuid, parent_thread_id=child_id))["thread_id"]
        child_latest = (turn("child", 4)[0]["content"], turn("child", 4)[-1]["content"])
        grandchild = View(
            uuid,
            grandchild_id,
            "grandchild",
            GRANDCHILD_BUDGET,
            [(0, root_latest, ROOT_SHARE), (child_id, child_latest, CHILD_SHARE)],
        )
        await post_messages(client, uuid, {"messages": turn("grandchild", 0)}, grandchild_id)
        await settled_jobs(client, uuid, "condense", at_least_one=False)
        before = [await payload_bytes(client, view, counter) for view in (child, grandchild)]
    async with running_app(settings) as client:
        assert [
            await payload_bytes(client, view, counter) for view in (child, grandchild)
        ] == before


async def payload_bytes(
    client: httpx.AsyncClient, view: View, counter: TextCounter
) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Each format's payload bytes and X- headers, and the thread's /context."""
    answers = await check_payloads(client, view, counter)
    context = await client.get(f"/tasks/{view.uuid}/context", params={"thread_id": view.thread_id})
    answers["context"] = context
    return {
        name: (r.content, {k: v for k, v in r.headers.items() if k.startswith("x-")})
        for name, r in answers.items()
    }
