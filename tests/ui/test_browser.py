"""The ops page in a real browser: headless Chromium (Debian's package, driven by Playwright)
against a real uvicorn of the service, seeded over HTTP. Each page's screenshot is kept in
tests/artifacts/ui/."""

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from app.ui.pages import TASKS_PER_PAGE
from tests.support.browser import chromium, requires_chromium, screenshot
from tests.support.postgres import PostgresDatabases
from tests.support.server import Server, server_of_its_own
from tests.support.ui import compacted_task, compactions, plain_tasks

pytestmark = [pytest.mark.e2e, requires_chromium]

ADMIN = "admin-3Nf6bT1yH8cJ5zD0"
FAST = {"FSYNC": "never", "JOB_POLL_S": "0.05"}


@pytest.fixture
def server(tmp_path: Path, postgres: PostgresDatabases | None) -> Iterator[Server]:
    with server_of_its_own(tmp_path, postgres, FAST) as started:
        yield started


@pytest.fixture
def keyed_server(tmp_path: Path, postgres: PostgresDatabases | None) -> Iterator[Server]:
    with server_of_its_own(tmp_path, postgres, FAST | {"ADMIN_API_KEYS": ADMIN}) as started:
        yield started


async def rows(page: Page) -> list[str]:
    """The task list's uuids as the browser shows them (their links' targets)."""
    links = page.locator("#task-table tbody tr.task-row td:first-child a")
    return [
        (await links.nth(i).get_attribute("href") or "").rsplit("/", 1)[-1]
        for i in range(await links.count())
    ]


async def test_the_pages_render_filter_paginate_and_show_a_compaction(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        plain = await plain_tasks(client, TASKS_PER_PAGE + 2, user="bob")
        compacted = await compacted_task(client, user="alice")
        records = await compactions(client, compacted)
        assert (
            await client.post(f"/tasks/{plain[0]}/fail", json={"error_message": "boom"})
        ).status_code == 200

    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(f"{server.base_url}/ui")
        await expect(page.locator("h1")).to_have_text("Tasks")
        await expect(page.locator('#counts [data-status="running"]')).to_have_text(
            str(TASKS_PER_PAGE + 2)  # the plain ones and the compacted one, less the failed
        )
        assert await rows(page) == [compacted, *plain[::-1][: TASKS_PER_PAGE - 1]]
        await screenshot(page, "tasks")

        await page.click("#next-page")
        await page.wait_for_url(re.compile(r"cursor="))
        assert await rows(page) == plain[::-1][TASKS_PER_PAGE - 1 :]

        await page.goto(f"{server.base_url}/ui")
        await page.select_option('select[name="status"]', "failed")
        await page.click('#filters button[type="submit"]')
        await page.wait_for_url(re.compile(r"status=failed"))
        assert await rows(page) == [plain[0]]
        await page.fill('input[name="user"]', "alice")
        await page.select_option('select[name="status"]', "")
        await page.click('#filters button[type="submit"]')
        await page.wait_for_url(re.compile(r"user=alice"))
        assert await rows(page) == [compacted]

        await page.click(f'a[href="/ui/tasks/{compacted}"]')
        await expect(page.locator("#context-picture")).to_be_visible()
        bars = page.locator("#context-picture rect.bar")
        assert await bars.count() > 1
        assert await page.locator("#context-picture rect.mark").count() >= 1
        timeline = page.locator("#compaction-timeline tbody tr")
        await expect(timeline).to_have_count(len(records))
        await expect(timeline.first).to_contain_text(records[0]["kind"])
        await screenshot(page, "task")

        await page.fill('#context form.goto input[name="after_seq"]', "2")
        await page.click("#context form.goto button")
        await expect(page.locator("#seq-3")).to_contain_text("seq 3")
        await screenshot(page, "history")

        await page.click("#nav-stats")
        await expect(page.locator("figure.chart svg")).to_have_count(4)
        assert await page.locator("rect.chart-bar").count() == 4 * 31
        await screenshot(page, "stats")


async def test_the_login_form_opens_the_pages(keyed_server: Server) -> None:
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(f"{keyed_server.base_url}/ui/stats")
        await expect(page).to_have_url(f"{keyed_server.base_url}/ui/login")
        await screenshot(page, "login")
        await page.fill('input[name="key"]', "wrong-key-0000000000")
        await page.click("form.login button")
        await expect(page.locator("#login-refused")).to_be_visible()
        await page.fill('input[name="key"]', ADMIN)
        await page.click("form.login button")
        await expect(page.locator("h1")).to_have_text("Tasks")
        assert ADMIN not in page.url
        # The session cookie is not for scripts.
        assert await page.evaluate("document.cookie") == ""
        await page.click("#nav-stats")
        await expect(page.locator("h1")).to_have_text("Stats")
        await page.click(".logout button")
        await expect(page).to_have_url(f"{keyed_server.base_url}/ui/login")
