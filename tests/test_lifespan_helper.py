"""The tests' lifespan helper: a hung startup or shutdown fails with the stacks that hung."""

import asyncio
from typing import Any

import pytest

from tests.lifespan import lifespan_of


def app_stuck_in(step: str) -> Any:
    """A bare ASGI app whose lifespan hangs in ``step`` ("startup" or "shutdown")."""

    async def stuck_here_forever() -> None:
        await asyncio.Event().wait()

    async def application(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        while True:
            message = await receive()
            kind = message["type"].removeprefix("lifespan.")
            if kind == step:
                await stuck_here_forever()
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return

    return application


@pytest.mark.parametrize("step", ["startup", "shutdown"])
async def test_a_stuck_step_fails_with_its_stacks(step: str) -> None:
    with pytest.raises(AssertionError) as failure:
        async with lifespan_of(app_stuck_in(step), timeout_s=1):
            pass
    message = str(failure.value)
    assert message.startswith(f"the app's {step} took over 1 s; stacks 0.9 s in:")
    assert "in stuck_here_forever" in message  # the asyncio task that hung
    assert "--- thread MainThread" in message


async def test_an_app_that_starts_and_stops_in_time_is_served() -> None:
    async with lifespan_of(app_stuck_in("nothing"), timeout_s=1) as started:
        assert callable(started)
