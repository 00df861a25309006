"""Anchors as each viewer sees them (seed 003's table, SPEC §8), through the API.

Seed 003's tree is built for real: root -> stelis_1 -> stelis_1_1 and a sibling stelis_2, each
with a label and an exchange of its own. Windows are large (100k) so that every protected region
holds its whole context and each anchor is in the payload of every viewer below its parent.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.context.records import ANCHOR, ANCHOR_TOKENS
from app.formats import FORMATS
from app.tokens.counters import TextCounter, counter_for
from tests.fakes.llm_server import FakeLLM, fake_llm  # noqa: F401
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.formats import validate_payload
from tests.support.payloads import context_view, served
from tests.support.settings import llm_settings
from tests.support.tasks import append, create_task
from tests.support.threads import start
from tests.support.waits import settled_jobs

LABELS = {"stelis_1": "autonomous run", "stelis_1_1": "coder", "stelis_2": "another task"}
PARENTS = {"stelis_1": "root", "stelis_1_1": "stelis_1", "stelis_2": "root"}
MODEL = "gpt-4o"


@dataclass(frozen=True)
class Tree:
    uuid: str
    ids: dict[str, int]  # "root" (0) and LABELS' names -> thread id


def exchange(name: str, count: int = 4) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{name} {'question' if i % 2 == 0 else 'answer'} {i}",
        }
        for i in range(count)
    ]


async def seed_tree(client: httpx.AsyncClient) -> Tree:
    """Seed 003's example tree; each context gets messages before and after its child starts."""
    task = await create_task(client, context_length=100_000, system_prompt="You are a persona.")
    ids = {"root": 0}
    await append(client, task["uuid"], *exchange("root", 2))
    for name in LABELS:
        parent = ids[PARENTS[name]]
        thread = await start(client, task["uuid"], parent_thread_id=parent, label=LABELS[name])
        ids[name] = thread["thread_id"]
        await append(client, task["uuid"], *exchange(PARENTS[name] + " later", 2), thread_id=parent)
        await append(client, task["uuid"], *exchange(name), thread_id=ids[name])
    return Tree(task["uuid"], ids)


def one_line(label: str, thread_id: int) -> str:
    return f"[Thread {label} (#{thread_id}) started]"


def full_header(label: str) -> str:
    return f"[Thread: {label}]"


def anchor_renderings(contents: list[str], label: str, thread_id: int) -> list[str]:
    """How the thread's anchor shows among these contents: "one line" or "full", per copy."""
    found = []
    for content in contents:
        if content == one_line(label, thread_id):
            found.append("one line")
        elif content.startswith(full_header(label) + f"\n- ID: {thread_id}\n"):
            found.append("full")
    return found


def system_contents(payload: dict[str, Any]) -> list[str]:
    """The system messages' texts of an OpenAI payload."""
    return [m["content"] for m in payload["messages"] if m["role"] == "system"]


def located(view: dict[str, Any], content_of: str) -> list[tuple[str, int | None]]:
    """Where /context shows messages whose content starts with ``content_of``: ("protected",
    the ancestor) or ("messages", None)."""
    places: list[tuple[str, int | None]] = [
        ("protected", p["thread_id"])
        for p in view["protected"]
        if str(p["message"]["content"]).startswith(content_of)
    ]
    places += [
        ("messages", None)
        for m in view["messages"]
        if str(m["message"]["content"]).startswith(content_of)
    ]
    return places


# Seed 003's table: (viewer, the thread whose anchor is looked at, rendering).
SEED_003_TABLE = [
    ("stelis_1", "stelis_1", "one line"),  # itself
    ("stelis_1_1", "stelis_1", "one line"),  # its parent
    ("stelis_1_1", "stelis_1_1", "one line"),  # itself, in its parent's protected region
    ("root", "stelis_1", "full"),
    ("stelis_2", "stelis_1", "full"),  # another branch, through root's protected region
]
# The same rule, beyond the table: a parent sees its child's anchor in full, in its own lines.
BEYOND_THE_TABLE = [("stelis_1", "stelis_1_1", "full")]


@pytest.mark.parametrize(("viewer", "anchored", "rendering"), SEED_003_TABLE + BEYOND_THE_TABLE)
async def test_seed_003_s_table(
    client: httpx.AsyncClient, viewer: str, anchored: str, rendering: str
) -> None:
    tree = await seed_tree(client)
    viewer_id, anchor_id = tree.ids[viewer], tree.ids[anchored]
    label = LABELS[anchored]

    payload = (await served(client, tree.uuid, viewer_id)).json()
    assert anchor_renderings(system_contents(payload), label, anchor_id) == [rendering]

    view = await context_view(client, tree.uuid, viewer_id)
    contents = [p["message"]["content"] for p in view["protected"]]
    contents += [m["message"]["content"] for m in view["messages"]]
    assert anchor_renderings(contents, label, anchor_id) == [rendering]
    # It lies in its parent's context: the viewer's own lines or that ancestor's region.
    parent = tree.ids[PARENTS[anchored]]
    where = ("messages", None) if parent == viewer_id else ("protected", parent)
    shown = one_line(label, anchor_id) if rendering == "one line" else full_header(label)
    assert located(view, shown) == [where]

    # Every format shows the same rendering (anthropic and ollama restate the text).
    for fmt in FORMATS:
        text = json.dumps((await served(client, tree.uuid, viewer_id, fmt)).json())
        expected_one_line = rendering == "one line"
        assert (json.dumps(one_line(label, anchor_id))[1:-1] in text) is expected_one_line, fmt
        assert (full_header(label) in text) is not expected_one_line, fmt


async def test_an_anchor_outside_the_viewer_s_chain_is_not_shown(
    client: httpx.AsyncClient,
) -> None:
    """stelis_1_1's anchor lies in stelis_1's context, which neither root nor stelis_2 sees."""
    tree = await seed_tree(client)
    label, anchor_id = LABELS["stelis_1_1"], tree.ids["stelis_1_1"]
    for viewer in ("root", "stelis_2"):
        text = (await served(client, tree.uuid, tree.ids[viewer])).text
        assert label not in text, viewer
        assert f"(#{anchor_id})" not in text, viewer


def when(iso: str) -> str:
    """A ThreadOut timestamp as anchors print it."""
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC")


async def root_anchor(client: httpx.AsyncClient, uuid: str, label: str) -> str:
    """The (one) full rendering of ``label``'s anchor in the root's payload."""
    contents = system_contents((await served(client, uuid, 0)).json())
    found = [c for c in contents if c.startswith(full_header(label))]
    assert len(found) == 1, contents
    return found[0]


async def thread_record(client: httpx.AsyncClient, uuid: str, thread_id: int) -> dict[str, Any]:
    tree = (await client.get(f"/tasks/{uuid}/threads")).json()
    record: dict[str, Any] = next(c for c in tree["children"] if c["thread_id"] == thread_id)
    return record


async def test_the_full_rendering_s_fields(context_dir: Path, fake_llm: FakeLLM) -> None:  # noqa: F811
    fake_llm.set("ok", text="Wrote parser guard; tests pass.")
    async with running_app(llm_settings(context_dir, fake_llm)) as client:
        uuid = (await create_task(client, system_prompt="You are a persona."))["uuid"]
        await append(client, uuid, *exchange("root", 2))
        thread = await start(client, uuid, label="fix parser")
        messages = exchange("fix", 5)
        await append(client, uuid, *messages, thread_id=thread["thread_id"])
        header = [
            "[Thread: fix parser]",
            f"- ID: {thread['thread_id']}",
            f"- Started: {when(thread['created_at'])}",
        ]
        latest = ["## Latest exchanges", *(f"[{m['role']}]: {m['content']}" for m in messages[-3:])]
        expected = [*header, "- Ended: in progress", "- Messages: 5", "", *latest]
        assert await root_anchor(client, uuid, "fix parser") == "\n".join(expected)

        response = await client.post(f"/tasks/{uuid}/threads/{thread['thread_id']}/end", json={})
        assert response.status_code == 200, response.text
        ended = response.json()
        assert ended["completed_at"] is not None
        assert [job["status"] for job in await settled_jobs(client, uuid, "chronicle")] == [
            "succeeded"
        ]
        record = await thread_record(client, uuid, thread["thread_id"])
        assert record["chronicle_summary"] == "Wrote parser guard; tests pass."
        chronicle = ["## Chronicle", "Wrote parser guard; tests pass.", ""]
        expected = [*header, f"- Ended: {when(ended['completed_at'])}", "- Messages: 5", ""]
        assert await root_anchor(client, uuid, "fix parser") == "\n".join(
            [*expected, *chronicle, *latest]
        )
        # The chronicle is also embedded after the anchor, as seed 003's completion message.
        contents = system_contents((await served(client, uuid, 0)).json())
        embedded = "[Thread completed: fix parser]\n\n## Chronicle\nWrote parser guard; tests pass."
        assert contents[-1] == embedded
        assert contents[-2].startswith("[Thread: fix parser]")


async def test_an_aborted_thread_shows_when_it_was_aborted(client: httpx.AsyncClient) -> None:
    uuid = (await create_task(client))["uuid"]
    thread = await start(client, uuid, label="doomed")
    response = await client.post(
        f"/tasks/{uuid}/threads/{thread['thread_id']}/abort", json={"generate_chronicle": False}
    )
    assert response.status_code == 200, response.text
    aborted = response.json()
    assert aborted["status"] == "aborted"
    assert await root_anchor(client, uuid, "doomed") == "\n".join(
        [
            "[Thread: doomed]",
            f"- ID: {thread['thread_id']}",
            f"- Started: {when(thread['created_at'])}",
            f"- Ended: aborted {when(aborted['completed_at'])}",
            "- Messages: 0",
        ]
    )


def recount(fmt: str, response: httpx.Response) -> int:
    """The served payload counted in its format's own terms, with the task's counter."""
    counter = counter_for(MODEL, response.headers["X-Token-Counter"])
    return FORMATS[fmt].payload_tokens(counter, response.json())


@pytest.mark.parametrize("fmt", sorted(FORMATS))
async def test_served_payloads_hide_the_key_and_count_anchors_as_upper_bounds(
    client: httpx.AsyncClient, fmt: str
) -> None:
    tree = await seed_tree(client)
    for name, thread_id in tree.ids.items():
        response = await served(client, tree.uuid, thread_id, fmt)
        assert ANCHOR.encode() not in response.content, (name, fmt)
        validate_payload(fmt, response.json())
        tokens = int(response.headers["X-Context-Tokens"])
        assert recount(fmt, response) <= tokens <= int(response.headers["X-Context-Budget"])
        if thread_id:
            protected = int(response.headers["X-Protected-Tokens"])
            assert tokens == int(response.headers["X-Thread-Tokens"]) + protected
        view = await client.get(
            f"/tasks/{tree.uuid}/context", params={"thread_id": thread_id, "format": fmt}
        )
        assert view.status_code == 200, view.text
        assert ANCHOR.encode() not in view.content, (name, fmt)


@pytest.mark.parametrize(
    "body",
    [
        {"role": "system", "content": "[Thread x (#1) started]", ANCHOR: 1},
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "", ANCHOR: 2},
            ]
        },
        {"role": "user", "content": "hi", ANCHOR: None},
    ],
)
@pytest.mark.parametrize("target", ["root", "stelis_1"])
async def test_a_client_cannot_post_an_anchor(
    client: httpx.AsyncClient, context_dir: Path, body: dict[str, Any], target: str
) -> None:
    tree = await seed_tree(client)
    before = snapshot_dir(context_dir)
    tree_before = (await client.get(f"/tasks/{tree.uuid}/threads")).json()
    response = await client.post(
        f"/tasks/{tree.uuid}/messages",
        params={"thread_id": tree.ids[target]},
        json=body,
        headers={"Idempotency-Key": "anchor-forgery"},
    )
    assert assert_error(response, 422, "reserved_field")["fields"] == [ANCHOR]
    assert ANCHOR in response.json()["error"]["message"]  # refused for the key, not otherwise
    assert snapshot_dir(context_dir) == before
    assert (await client.get(f"/tasks/{tree.uuid}/threads")).json() == tree_before
    # The key of the refused request was not kept: a valid retry under it is appended.
    valid = {"role": "user", "content": "hi"}
    response = await client.post(
        f"/tasks/{tree.uuid}/messages",
        params={"thread_id": tree.ids[target]},
        json=valid,
        headers={"Idempotency-Key": "anchor-forgery"},
    )
    assert response.status_code == 201, response.text


async def test_a_message_quoting_the_key_is_sent_as_written(client: httpx.AsyncClient) -> None:
    """An anchor is known by its line's last key, which no content can fake."""
    tree = await seed_tree(client)
    forged = 'see ,"stelis_anchor":1}'
    await append(client, tree.uuid, {"role": "user", "content": forged})
    for thread_id in (0, tree.ids["stelis_2"]):
        payload = (await served(client, tree.uuid, thread_id)).json()
        assert [m["content"] for m in payload["messages"]].count(forged) == 1
        renderings = anchor_renderings(
            system_contents(payload), LABELS["stelis_1"], tree.ids["stelis_1"]
        )
        assert renderings == ["full"]


def message_cost(fmt: str, counter: TextCounter, message: dict[str, Any]) -> int:
    return FORMATS[fmt].message_tokens(counter, message)


HUGE_LABEL = ("refactor the whole storage layer " * 7).strip()  # 230 characters (255 allowed)
CHRONICLE_PROMPT = "Write the longest chronicle you can: every file, every command, every result."


@pytest.mark.parametrize("token_counter", ["heuristic", "auto"])
async def test_a_huge_thread_s_anchor_costs_at_most_anchor_tokens(
    context_dir: Path,
    fake_llm: FakeLLM,  # noqa: F811
    token_counter: str,
) -> None:
    """Long label, 20k-character messages, a chronicle of over 40k characters: the full rendering is
    cut to ANCHOR_TOKENS in every format, seen from root (its own line) and from a sibling
    (root's protected region), before and after the thread ends."""
    chronicle = " ".join(
        f"step {i}: edited app/storage/file_{i}.py and ran pytest" for i in range(800)
    )
    assert len(chronicle) > 40_000
    fake_llm.set("ok", text=chronicle)
    settings = llm_settings(context_dir, fake_llm, token_counter=token_counter)
    async with running_app(settings) as client:
        uuid = (await create_task(client, context_length=100_000))["uuid"]
        await append(client, uuid, *exchange("root", 2))
        huge = await start(client, uuid, label=HUGE_LABEL, chronicle_prompt=CHRONICLE_PROMPT)
        sibling = await start(client, uuid, label="sibling")
        await append(client, uuid, *exchange("sibling", 2), thread_id=sibling["thread_id"])
        words = [
            {"role": m["role"], "content": m["content"] + " data" * 4000}
            for m in exchange("huge", 6)
        ]
        assert all(len(m["content"]) > 20_000 for m in words)
        await append(client, uuid, *words, thread_id=huge["thread_id"])
        await check_anchor_costs(client, uuid, sibling["thread_id"], chronicled=False)

        response = await client.post(f"/tasks/{uuid}/threads/{huge['thread_id']}/end", json={})
        assert response.status_code == 200, response.text
        assert [j["status"] for j in await settled_jobs(client, uuid, "chronicle")] == ["succeeded"]
        assert any(CHRONICLE_PROMPT in json.dumps(r.body) for r in fake_llm.requests)
        record = await thread_record(client, uuid, huge["thread_id"])
        assert record["chronicle_summary"] == chronicle
        await check_anchor_costs(client, uuid, sibling["thread_id"], chronicled=True)


async def check_anchor_costs(
    client: httpx.AsyncClient, uuid: str, sibling: int, *, chronicled: bool
) -> None:
    header = full_header(HUGE_LABEL)
    for fmt in FORMATS:
        root = await context_view(client, uuid, 0, fmt)
        counter = counter_for(MODEL, root["token_counter"])
        anchors = [m for m in root["messages"] if m["message"]["content"].startswith(header)]
        beside = await context_view(client, uuid, sibling, fmt)
        anchors += [p for p in beside["protected"] if p["message"]["content"].startswith(header)]
        assert len(anchors) == 2, fmt
        for entry in anchors:
            assert entry["tokens"] == message_cost(fmt, counter, entry["message"]), fmt
            assert entry["tokens"] <= ANCHOR_TOKENS, (fmt, entry)
            assert ("## Chronicle" in entry["message"]["content"]) is chronicled, fmt
        for thread_id in (0, sibling):
            response = await served(client, uuid, thread_id, fmt)
            assert recount(fmt, response) <= int(response.headers["X-Context-Tokens"]), fmt


async def test_a_label_costlier_than_the_allowance_is_still_an_upper_bound(
    context_dir: Path,
) -> None:
    """A 254-character label of emoji and hieroglyphs costs more than ANCHOR_TOKENS on its own:
    the anchor is then stored at its one line's cost, and no rendering costs more."""
    label = "🦜𓀀" * 127
    async with running_app(Settings(context_dir=context_dir, token_counter="auto")) as client:
        uuid = (await create_task(client, context_length=100_000))["uuid"]
        thread = await start(client, uuid, label=label)
        sibling = await start(client, uuid, label="sibling")
        await append(client, uuid, *exchange("😀" * 300), thread_id=thread["thread_id"])
        history = (await client.get(f"/tasks/{uuid}/messages")).json()["messages"]
        record = next(m for m in history if m.get(ANCHOR) == thread["thread_id"])
        assert record["tokens"] > ANCHOR_TOKENS  # the case this test is about
        for fmt in FORMATS:
            stored = record["format_tokens"].get(fmt, record["tokens"])
            root = await context_view(client, uuid, 0, fmt)
            beside = await context_view(client, uuid, sibling["thread_id"], fmt)
            entries = [*root["messages"], *beside["protected"]]
            anchors = [e for e in entries if label in e["message"]["content"]]
            assert len(anchors) == 2, fmt
            assert all(e["tokens"] <= stored for e in anchors), (fmt, stored, anchors)
            for thread_id in (0, sibling["thread_id"]):
                response = await served(client, uuid, thread_id, fmt)
                assert recount(fmt, response) <= int(response.headers["X-Context-Tokens"]), fmt
