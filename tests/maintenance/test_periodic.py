"""The periodic cleanup: old finished tasks disappear without any call; a failed round is
logged and the next one comes; the first round comes a while after startup; shutdown stops it
at a stopping point."""

import asyncio
import logging
from pathlib import Path

import pytest

from app.maintenance.periodic import FIRST_ROUND_WITHIN_S, Periodic, first_round_delay
from tests.support.app import running_app
from tests.support.cleanup import assert_gone, assert_present, backdate, cleanup_settings, make_task
from tests.support.waits import settle

INTERVAL_S = 0.1


async def test_old_finished_task_disappears_by_itself(tmp_path: Path) -> None:
    settings = cleanup_settings(tmp_path, cleanup={"days": 1, "interval_s": INTERVAL_S})
    async with running_app(settings) as client:
        old = await make_task(client, "failed")
        recent = await make_task(client, "completed")
        running = await make_task(client, "running")
        await settle(client)
        await backdate(settings, [old, running], days=2)
        for _ in range(200):
            if (await client.get(f"/tasks/{old}")).status_code == 404:
                break
            await asyncio.sleep(INTERVAL_S / 2)
        await assert_gone(client, settings.context_dir, old)
        await assert_present(client, settings.context_dir, recent, "completed")
        await assert_present(client, settings.context_dir, running, "running")


async def test_no_periodic_cleanup_when_cleanup_days_is_0(tmp_path: Path) -> None:
    settings = cleanup_settings(tmp_path, cleanup={"days": 0, "interval_s": INTERVAL_S})
    async with running_app(settings) as client:
        old = await make_task(client, "completed")
        await settle(client)
        await backdate(settings, [old], days=3650)
        await asyncio.sleep(INTERVAL_S * 10)
        await assert_present(client, settings.context_dir, old, "completed")


async def test_a_failed_round_is_logged_and_the_next_one_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="app.maintenance")
    rounds: list[int] = []

    async def flaky(stop: asyncio.Event) -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise OSError("disk on fire")

    periodic = Periodic("flaky work", 0.01, flaky)
    periodic.start()
    for _ in range(500):
        if len(rounds) >= 3:
            break
        await asyncio.sleep(0.01)
    await periodic.stop()
    assert len(rounds) >= 3
    done = len(rounds)
    await asyncio.sleep(0.05)
    assert len(rounds) == done, "a round ran after stop()"
    failures = [r for r in caplog.records if r.name == "app.maintenance.periodic"]
    assert len(failures) == 1
    assert "flaky work failed" in failures[0].getMessage()
    assert failures[0].exc_info is not None
    assert "disk on fire" in str(failures[0].exc_info[1])


async def test_stop_waits_for_a_stopping_point_then_cancels() -> None:
    """A round that honours the event ends by itself; one that does not is cancelled after
    the grace period."""
    finished: list[str] = []

    async def polite(stop: asyncio.Event) -> None:
        await stop.wait()
        await asyncio.sleep(0.01)  # the rest of the task in hand
        finished.append("polite")

    async def stubborn(stop: asyncio.Event) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append("stubborn cancelled")

    for action in (polite, stubborn):
        periodic = Periodic(action.__name__, 3600, action)
        periodic.start()
        await asyncio.sleep(0.01)
        await asyncio.wait_for(periodic.stop(grace_s=0.2), 5)
    assert finished == ["polite", "stubborn cancelled"]


async def test_the_first_round_comes_after_its_delay_and_a_stop_meanwhile_skips_it() -> None:
    rounds: list[float] = []
    loop = asyncio.get_running_loop()

    async def note(stop: asyncio.Event) -> None:
        rounds.append(loop.time())

    started = loop.time()
    periodic = Periodic("delayed", 3600, note, first_after_s=0.2)
    periodic.start()
    for _ in range(500):
        if rounds:
            break
        await asyncio.sleep(0.01)
    await periodic.stop()
    assert len(rounds) == 1
    assert rounds[0] - started >= 0.2

    never = Periodic("stopped first", 3600, note, first_after_s=3600)
    never.start()
    await asyncio.sleep(0.01)
    await asyncio.wait_for(never.stop(grace_s=0.2), 1)
    assert len(rounds) == 1


def test_the_services_first_rounds_are_spread_within_a_minute_or_the_interval() -> None:
    """Workers started together do not all run a round at once, and a service restarted more
    often than the interval still gets to one."""
    delays = [first_round_delay(3600) for _ in range(200)]
    assert all(0 <= d <= FIRST_ROUND_WITHIN_S for d in delays)
    assert max(delays) - min(delays) > FIRST_ROUND_WITHIN_S / 2
    assert all(0 <= first_round_delay(0.1) <= 0.1 for _ in range(50))
