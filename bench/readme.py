"""Writes the latest results' tables into bench/README.md, between its two markers."""

import json
from pathlib import Path
from typing import Any

from bench.harness import Table

README = Path(__file__).parent / "README.md"
BEGIN = "<!-- results: written by python -m bench; edit the text outside the markers -->"
END = "<!-- end of results -->"


def render(results: Path, names: tuple[str, ...]) -> str:
    parts = []
    for name in names:
        path = results / f"{name}.json"
        if not path.exists():
            continue
        document: dict[str, Any] = json.loads(path.read_text())
        machine = document["machine"]
        parts.append(
            f"### {name}\n\n_{document['when']}, {document['seconds']} s; {machine['cpus']} CPUs, "
            f"{machine['memory_gib']} GiB, Python {machine['python']}, {machine['platform']}_\n"
        )
        parts += [Table(**table).markdown() for table in document["tables"]]
    return "\n\n".join(parts)


def update(results: Path, names: tuple[str, ...]) -> None:
    text = README.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(f"{head}{BEGIN}\n{render(results, names)}\n{END}{tail}")
