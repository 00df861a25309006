"""Headless Chromium (Debian's ``chromium`` package) driven by Playwright, for the ops page's
browser tests; never a browser Playwright downloads. Screenshots go to ARTIFACTS, which CI
keeps and git ignores."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.support.paths import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "tests" / "artifacts" / "ui"

requires_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"no browser: {CHROMIUM} is missing (apt-get install chromium; .ci/run does)",
)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def screenshot(page: Page, name: str) -> Path:
    """A full-page screenshot kept as a test artefact; its path is printed."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path
