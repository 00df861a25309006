"""Where things are: the repository, and the shared corpus and schemas beside it (../shared)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus" / "trajectories"
SCHEMAS = SHARED / "schemas"
