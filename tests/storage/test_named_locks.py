"""In-process locks by name (one compaction per context, one proxied conversation at a time):
a name keeps its one lock while anyone holds it or waits for it."""

import asyncio
import gc

from app.storage.locks import NamedLocks


async def test_a_lock_just_let_go_to_a_waiter_is_the_one_a_newcomer_gets() -> None:
    """The moment a holder lets go, its waiter is woken but has not run yet: the lock looks
    free. A third comer then must queue behind the waiter, not get a lock of its own and run
    beside it (two summaries of one context paid for, one of them thrown away)."""
    locks = NamedLocks()
    order: list[str] = []

    async def use(name: str) -> None:
        async with locks(("task", 0)):
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    first = locks(("task", 0))
    await first.acquire()
    waiter = asyncio.create_task(use("waiter"))
    await asyncio.sleep(0)  # the waiter now waits for the lock
    first.release()  # woken, not yet run
    assert not first.locked()
    assert locks(("task", 0)) is first
    newcomer = asyncio.create_task(use("newcomer"))
    await asyncio.gather(waiter, newcomer)
    assert order == ["waiter in", "waiter out", "newcomer in", "newcomer out"]


async def test_a_name_nobody_holds_or_waits_for_is_forgotten() -> None:
    locks = NamedLocks()
    async with locks("a"):
        pass
    gc.collect()
    assert len(locks._held) == 0
