"""The fixture of the end-to-end tests: real uvicorn processes, ended at teardown."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import ServerPool


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerPool]:
    """A pool of real servers on one temp CONTEXT_DIR, all ended at teardown (pass or fail)."""
    pool = ServerPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()
