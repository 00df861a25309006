"""The database's side of a commit: a context's head, its task's counters, and the
idempotency keys its appends registered."""

from datetime import UTC, datetime
from pathlib import Path

from app.config import Settings
from app.context import heads
from app.context.records import IdempotentResult
from app.lifespan import open_services
from app.tasks.schemas import TaskCreate
from tests.support.tasks import task_body


def answer(seq: int) -> dict[str, object]:
    return {"seqs": [seq], "tokens": [5], "context_tokens": 5 * seq, "compaction_scheduled": False}


async def test_a_key_registered_again_keeps_its_first_answer(context_dir: Path) -> None:
    """Keys are registered in one statement per commit that skips a key already there: a
    replay repeats the answer the client was first given."""
    async with open_services(Settings(context_dir=context_dir)) as services:
        created, _ = await services.task_creation.create(TaskCreate.model_validate(task_body()))
        uuid, head = created.task.uuid, created.head
        assert head is not None
        first = IdempotentResult("step-1", "a" * 64, answer(2))
        other = IdempotentResult("step-2", "c" * 64, answer(3))
        for results in ([first], [IdempotentResult("step-1", "b" * 64, answer(9)), other]):
            async with services.db.transaction() as session:
                await heads.commit_head(
                    session, (uuid, 0), head, {}, results, None, datetime.now(UTC)
                )
        async with services.db.reader() as session:
            known = await heads.load_idempotency_keys(session, uuid, ["step-1", "step-2"])
    assert known == {"step-1": first, "step-2": other}
