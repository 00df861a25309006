"""The app's lifespan around a test, with a failure that says where a hung step was stuck.

A startup or shutdown that overruns its timeout is cancelled by asgi-lifespan, and the plain
TimeoutError it leaves says nothing of what was waiting. So a thread takes every thread's and
every asyncio task's stack a little before the timeout, and the failure carries them.
"""

import asyncio
import gc
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import AsyncGeneratorType, FrameType
from typing import Any

from asgi_lifespan import LifespanManager
from starlette.types import ASGIApp

STEP_TIMEOUT_S = 60.0


@asynccontextmanager
async def lifespan_of(
    application: ASGIApp, timeout_s: float = STEP_TIMEOUT_S
) -> AsyncIterator[ASGIApp]:
    """Start the app, yield it (with its lifespan state), and shut it down; each step fails
    after ``timeout_s``."""
    manager = LifespanManager(application, startup_timeout=timeout_s, shutdown_timeout=timeout_s)
    with _stacks_if_stuck("startup", timeout_s):
        await manager.__aenter__()
    try:
        yield manager.app
    except BaseException as exc:
        await manager.__aexit__(type(exc), exc, exc.__traceback__)
        raise
    with _stacks_if_stuck("shutdown", timeout_s):
        await manager.__aexit__(None, None, None)


@contextmanager
def _stacks_if_stuck(step: str, timeout_s: float) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    taken: list[str] = []
    at_s = timeout_s * 0.9

    def take() -> None:
        taken.append(_stacks(loop))
        # Also at once: should the step then never end, pytest-timeout's report has them.
        print(f"the app's {step} is still running {at_s:g} s in:\n{taken[0]}", file=sys.stderr)

    # A thread, not a loop callback: it still runs when the event loop itself is blocked.
    timer = threading.Timer(at_s, take)
    timer.daemon = True
    began = time.monotonic()
    timer.start()
    try:
        yield
    except TimeoutError as exc:
        if time.monotonic() - began < timeout_s:
            raise  # the app's own, not the step's timeout
        stacks = taken[0] if taken else "(not taken)"
        raise AssertionError(
            f"the app's {step} took over {timeout_s:g} s; stacks {at_s:g} s in:\n{stacks}"
        ) from exc
    finally:
        timer.cancel()


def _stacks(loop: asyncio.AbstractEventLoop) -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = [
        f"--- thread {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    ]
    try:
        # Read from another thread: good enough for a picture of a hang.
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError as exc:
        tasks = []
        parts.append(f"--- asyncio tasks unavailable: {exc}")
    for task in tasks:
        frames = traceback.StackSummary.extract((f, f.f_lineno) for f in _awaiting(task))
        parts.append(f"--- task {task.get_name()}\n" + "".join(frames.format()))
    return "\n".join(parts)


def _awaiting(task: asyncio.Task[object]) -> Iterator[FrameType]:
    """The frames of a task's coroutine down the chain of awaits (Task.get_stack stops at the
    first one before Python 3.14), through async generators (the app's lifespan is one)."""
    awaitable: Any = task.get_coro()
    while awaitable is not None:
        if type(awaitable).__name__ in ("async_generator_asend", "async_generator_athrow"):
            # What anext() or athrow() returns keeps its generator out of sight but for gc.
            generators = gc.get_referents(awaitable)
            awaitable = next((g for g in generators if isinstance(g, AsyncGeneratorType)), None)
            continue
        frame = next(_attributes(awaitable, "cr_frame", "gi_frame", "ag_frame"), None)
        if frame is None:
            return
        yield frame
        awaitable = next(_attributes(awaitable, "cr_await", "gi_yieldfrom", "ag_await"), None)


def _attributes(thing: object, *names: str) -> Iterator[Any]:
    """The values of those of ``names`` that ``thing`` has and are not None."""
    return (value for name in names if (value := getattr(thing, name, None)) is not None)
