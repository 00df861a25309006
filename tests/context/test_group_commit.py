"""Answering a committed group: each append's answer counts the context as it stood after
that append, less what the cuts over the message cap of its own and earlier messages took off."""

import asyncio
from typing import Any

from app.context.group_commit import FollowUp, PendingAppend, resolve


def answered(seqs: list[int], context_tokens: int) -> dict[str, Any]:
    return {"seqs": seqs, "tokens": [10] * len(seqs), "context_tokens": context_tokens}


async def test_a_cut_counts_in_the_answers_of_its_append_and_later_ones_only() -> None:
    loop = asyncio.get_running_loop()
    group = [PendingAppend([], None, loop.create_future()) for _ in range(4)]
    group[0].result = (answered([5], 1_000), False)
    group[1].result = (answered([6, 7], 3_000), False)  # seq 7: a build log over the cap
    group[2].result = (answered([8], 3_010), False)
    replay = {**answered([3], 900), "compaction_scheduled": False}
    group[3].result = (replay, True)

    resolve(group, FollowUp(scheduled=True, cuts=((7, 1_500),)))

    answers = [pending.future.result() for pending in group]
    assert [a["context_tokens"] for a, _ in answers] == [1_000, 1_500, 1_510, 900]
    assert [a["compaction_scheduled"] for a, _ in answers] == [True, True, True, False]
    assert answers[3] == (replay, True)  # a replay repeats its first answer


async def test_without_a_cut_the_answers_are_as_written() -> None:
    loop = asyncio.get_running_loop()
    pending = PendingAppend([], None, loop.create_future())
    pending.result = (answered([2], 40), False)
    resolve([pending], FollowUp())
    assert pending.future.result() == ({**answered([2], 40), "compaction_scheduled": False}, False)
