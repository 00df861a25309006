"""What the client's tests share: task keys in the client's type."""

from context_client.types import TaskKey
from tests.support.tasks import DEFAULT_KEY


def task_key(**overrides: str) -> TaskKey:
    """The tests' default task key, some parts replaced."""
    key = DEFAULT_KEY | overrides
    return {
        "task_source": key["task_source"],
        "owner": key["owner"],
        "repo": key["repo"],
        "task_type": key["task_type"],
        "task_id": key["task_id"],
    }
