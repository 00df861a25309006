"""Blocking work in a worker thread that its caller cannot walk away from half-way.

A cancelled coroutine (a timeout, a shutdown) stops waiting for :func:`asyncio.to_thread`, but
the thread goes on. Under a task's lock that is a hazard: the lock is let go as the
cancellation unwinds, and the next holder (another coroutine, another process) writes the same
files beside a thread that is still writing them: two records with one seq, a repair cutting
what an append is writing. File work under a lock therefore goes through
:func:`finish_in_thread`, which lets a cancellation through only once the work has ended.
"""

import asyncio
import contextvars
from collections.abc import Callable
from functools import partial
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def finish_in_thread(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)`` in a worker thread, as :func:`asyncio.to_thread`, except that a
    cancellation of the caller waits for the work to end (its result, or its error, is then
    dropped) before it goes on.

    The work is awaited as the executor's future, not as a task of its own: a shutdown
    (``asyncio.run`` ending) cancels every task, and would end such a task at once while its
    thread still writes. A caller cancelled again and again while it waits (an anyio cancel
    scope does that at every turn of the loop) waits all the same, the loop turning meanwhile:
    file work takes milliseconds."""
    loop = asyncio.get_running_loop()
    call = partial(contextvars.copy_context().run, func, *args, **kwargs)
    work = loop.run_in_executor(None, call)
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            try:
                await asyncio.wait([work])
            except asyncio.CancelledError:  # cancelled again: the work still has to end
                continue
        if not work.cancelled():
            work.exception()  # retrieved: the cancellation is what the caller gets
        raise
