"""The tests' lifespan helper: a hung startup or shutdown fails with the stacks that hung."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from tests.support.lifespan import lifespan_of

pytestmark = pytest.mark.database_agnostic

TIMEOUT_S = 3.0


async def stuck_here_forever() -> None:
    await asyncio.Event().wait()


@asynccontextmanager
async def resources(stuck_in: str) -> AsyncIterator[None]:
    """Like the app's lifespan: an async generator, entered at startup and left at shutdown."""
    if stuck_in == "startup":
        await stuck_here_forever()
    yield
    if stuck_in == "shutdown":
        await stuck_here_forever()


def app_stuck_in(step: str) -> Any:
    """A bare ASGI app whose lifespan hangs in ``step`` ("startup" or "shutdown")."""

    async def application(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        async with AsyncExitStack() as stack:
            assert (await receive())["type"] == "lifespan.startup"
            await stack.enter_async_context(resources(step))
            await send({"type": "lifespan.startup.complete"})
            assert (await receive())["type"] == "lifespan.shutdown"
        await send({"type": "lifespan.shutdown.complete"})

    return application


@pytest.mark.parametrize("step", ["startup", "shutdown"])
async def test_a_stuck_step_fails_with_its_stacks(step: str) -> None:
    with pytest.raises(AssertionError) as failure:
        async with lifespan_of(app_stuck_in(step), timeout_s=TIMEOUT_S):
            pass
    message = str(failure.value)
    assert message.startswith(f"the app's {step} took over 3 s; stacks 2.7 s in:")
    # The asyncio task that hung, down to where: through the async generator of its lifespan.
    assert "in resources\n" in message
    assert "in stuck_here_forever\n" in message
    assert "--- thread MainThread" in message


async def test_an_app_that_starts_and_stops_in_time_is_served() -> None:
    async with lifespan_of(app_stuck_in("nothing"), timeout_s=TIMEOUT_S) as started:
        assert callable(started)


async def test_a_timeout_of_the_app_itself_is_not_taken_for_a_stuck_step() -> None:
    async def application(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        raise TimeoutError("the database did not answer")

    with pytest.raises(TimeoutError, match="the database did not answer"):
        async with lifespan_of(application, timeout_s=TIMEOUT_S):
            pass
