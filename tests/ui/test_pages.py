"""The ops page's HTML over the real app (no keys configured): each page answers, shows what
the JSON API says, filters and paginates; bad input is the API's error."""

import re
from html import escape, unescape

import httpx

from app.ui.pages import MESSAGES_PER_PAGE, TASKS_PER_PAGE
from tests.support.errors import assert_error
from tests.support.tasks import append, create_task, new_task, run_and_finish
from tests.support.threads import scene
from tests.support.ui import compacted_task, compactions, plain_tasks
from tests.support.waits import final_summary

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def task_links(html: str) -> list[str]:
    """The uuids of the task list's rows, in order."""
    return re.findall(r'<a href="/ui/tasks/([0-9a-f-]{36})" class="mono">', html)


def next_page(html: str) -> str | None:
    found = re.search(r'<a href="([^"]+)" id="next-page">', html)
    return unescape(found.group(1)) if found else None


async def test_the_list_pages_newest_first_and_filters(client: httpx.AsyncClient) -> None:
    uuids = await plain_tasks(client, TASKS_PER_PAGE + 3)
    stopped = uuids[0]
    assert (await client.post(f"/tasks/{stopped}/stop")).status_code == 200

    first = await client.get("/ui")
    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/html")
    assert task_links(first.text) == uuids[::-1][:TASKS_PER_PAGE]
    link = next_page(first.text)
    assert link is not None

    second = await client.get(link)
    assert task_links(second.text) == uuids[::-1][TASKS_PER_PAGE:]
    assert next_page(second.text) is None

    paused = await client.get("/ui", params={"status": "paused", "user": ""})
    assert task_links(paused.text) == [stopped]
    by_key = await client.get("/ui", params={"task_id": "plain-7", "status": ""})
    assert task_links(by_key.text) == [uuids[7]]


async def test_live_counts_count_each_status(client: httpx.AsyncClient) -> None:
    uuids = await plain_tasks(client, 3)
    assert (await client.post(f"/tasks/{uuids[1]}/complete")).status_code == 200
    response = await client.get("/ui/counts")
    assert response.status_code == 200
    assert response.json() == {"running": 2, "completed": 1}
    listed = (await client.get("/ui")).text
    assert '<span class="value" data-status="running">2</span>' in listed


async def test_a_compacted_task_shows_its_window_and_timeline(client: httpx.AsyncClient) -> None:
    uuid = await compacted_task(client)
    records = await compactions(client, uuid)
    assert {r["kind"] for r in records} >= {"mask"}
    response = await client.get(f"/ui/tasks/{uuid}")
    assert response.status_code == 200
    page = response.text
    # One timeline row per compaction, with its tier, span and tokens.
    rows = re.findall(r'<tr class="compaction tier-(\w+)">', page)
    assert rows == [r["kind"] for r in records]
    first = records[0]
    assert f"<td>{first['start_seq']} to {first['end_seq']}</td>" in page
    assert f'<td class="num">{first["original_tokens"]:,}</td>' in page
    durations = re.findall(r"<td>([\d,.]+) ms</td>", page)
    assert len(durations) == len(records)  # each compaction says how long it took
    # The picture: a bar per message of the context, the masked ones marked, the two lines.
    context = (await client.get(f"/tasks/{uuid}/context")).json()
    bars = re.findall(r'<rect class="bar role-(\w+) kind-(\w+)"', page)
    assert len(bars) == context["message_count"]
    kinds = {kind for _, kind in bars}
    assert kinds & {"masked", "summarised"}, kinds
    assert '<line class="budget"' in page
    assert '<line class="threshold"' in page
    assert f"budget {context['budget']:,}, compaction threshold {context['threshold']:,}" in page


async def test_the_history_reads_a_page_of_messages_from_any_seq(
    client: httpx.AsyncClient,
) -> None:
    uuid = await new_task(client)
    await append(client, uuid, *({"role": "user", "content": f"note {i}"} for i in range(30)))
    response = await client.get(f"/ui/tasks/{uuid}/history", params={"after_seq": 5})
    assert response.status_code == 200
    articles = re.findall(r'<article class="message [^"]*" id="seq-(\d+)">', response.text)
    seqs = [int(seq) for seq in articles]
    assert seqs == list(range(6, 6 + MESSAGES_PER_PAGE))
    assert "<pre>note 4</pre>" in response.text  # seq 6: the fifth note after the system prompt
    assert 'id="next-messages"' in response.text


async def test_the_stats_page_draws_a_chart_per_figure(client: httpx.AsyncClient) -> None:
    await plain_tasks(client, 2)
    for bucket, slots in (("day", 31), ("hour", 49)):
        response = await client.get("/ui/stats", params={"bucket": bucket})
        assert response.status_code == 200
        charts = re.findall(r"<figcaption>([^<]+) <small>peak ([\d,]+)</small>", response.text)
        assert [title for title, _ in charts] == [
            "Tasks created",
            "Tokens used",
            "Compactions",
            "Failures",
        ]
        assert charts[0][1] == "2"
        assert response.text.count('<rect class="chart-bar"') == 4 * slots


async def test_unknown_and_malformed_input_is_the_apis_error(client: httpx.AsyncClient) -> None:
    assert_error(await client.get(f"/ui/tasks/{UNKNOWN}"), 404, "task_not_found")
    assert_error(await client.get(f"/ui/tasks/{UNKNOWN}/history"), 404, "task_not_found")
    assert_error(await client.get("/ui/tasks/not-a-uuid"), 422, "validation_error")
    assert_error(await client.get("/ui", params={"status": "lost"}), 422, "validation_error")
    assert_error(await client.get("/ui", params={"cursor": "x"}), 422, "invalid_cursor")
    assert_error(await client.get("/ui/stats", params={"bucket": "week"}), 422, "validation_error")
    assert_error(await client.get("/ui", params={"colour": "red"}), 422, "validation_error")


async def test_the_pages_are_not_in_the_api_schema(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith("/ui")]


async def test_the_assets_are_served_from_the_package(client: httpx.AsyncClient) -> None:
    css = await client.get("/ui/static/ops.css")
    script = await client.get("/ui/static/ops.js")
    assert css.status_code == script.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert "javascript" in script.headers["content-type"]
    assert "http" not in (await client.get("/ui")).text.split("<main>")[0]  # no CDN


async def test_a_thread_is_drawn_and_the_tree_shows_it(client: httpx.AsyncClient) -> None:
    uuid, thread_id = await scene(client, label="investigate parser")
    page = (await client.get(f"/ui/tasks/{uuid}")).text
    assert "<em>investigate parser</em>" in page
    assert 'class="bar role-system kind-anchor"' in page  # the thread's anchor in its parent
    own = await client.get(f"/ui/tasks/{uuid}", params={"thread_id": thread_id})
    assert own.status_code == 200
    bars = re.findall(r'<rect class="bar role-(\w+) kind-message"', own.text)
    assert bars == ["user", "assistant"]
    assert_error(
        await client.get(f"/ui/tasks/{uuid}", params={"thread_id": 99}), 404, "thread_not_found"
    )


async def test_a_finished_run_and_its_successor(client: httpx.AsyncClient) -> None:
    failed = await run_and_finish(client, "fail")
    summary = (await final_summary(client, failed["uuid"]))["summary"]
    page = (await client.get(f"/ui/tasks/{failed['uuid']}")).text
    assert f'<pre class="summary">{escape(summary, quote=False)}</pre>' in page
    assert "tests failed: test_empty_input" in page
    successor = await create_task(client, system_prompt="You are a coding agent.")
    page = (await client.get(f"/ui/tasks/{successor['uuid']}")).text
    assert f'<a href="/ui/tasks/{failed["uuid"]}" class="mono">' in page
    assert "final_summary" in page


async def test_what_agents_posted_is_shown_as_text(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client)
    await append(client, uuid, {"role": "user", "content": "<script>alert(1)</script>"})
    for path in (f"/ui/tasks/{uuid}", f"/ui/tasks/{uuid}/history"):
        page = (await client.get(path)).text
        assert "<script>alert" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
