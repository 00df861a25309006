"""The import graph of app/: packages form no cycle, and the plumbing at the bottom imports no
domain. Read from the source (every import, those inside functions and under TYPE_CHECKING
too), so a new backward import fails here before a reader trips on it."""

import ast
import dataclasses
import graphlib
import itertools
from collections import defaultdict
from pathlib import Path

from app.lifespan import Services
from tests.support.paths import REPO

APP = REPO / "app"
# The plumbing every domain stands on: none of it may import a domain package (top-level
# modules such as app/config.py, app/errors.py and app/task_key.py stand below the domains too).
PLUMBING = frozenset(
    {"api", "auth", "db", "storage", "tokens", "formats", "observability", "llm", "webhooks"}
)
# The composition root: may import anything.
ROOTS = frozenset({"main", "routes", "cli", "lifespan"})


def unit_of(module: str) -> str | None:
    """The package (or top-level module) of app/ that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "app" and len(parts) > 1 else None


def imported_units(app: Path = APP) -> dict[str, dict[str, set[str]]]:
    """For each unit of ``app``, the units it imports and, for each, the files that do."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in app.rglob("*.py"):
        relative = path.relative_to(app)
        unit = relative.parts[0].removesuffix(".py")
        graph[unit]  # every unit is a node, even one that imports nothing
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if node.module == "app":  # from app import lifecycle
                    names = [f"app.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = unit_of(name)
                if target is not None and target != unit:
                    graph[unit][target].add(str(path.relative_to(app.parent)))
    return graph


def cycle_in(graph: dict[str, dict[str, set[str]]]) -> list[str]:
    """One cycle of the graph, each step with the files that import backwards ([]: none)."""
    sorter = graphlib.TopologicalSorter({unit: set(targets) for unit, targets in graph.items()})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        return [
            f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})" for a, b in itertools.pairwise(cycle)
        ]
    return []


def test_app_packages_import_each_other_one_way() -> None:
    cycle = cycle_in(imported_units())
    assert not cycle, "app/ packages import each other in a circle:\n" + "\n".join(cycle)


def test_a_backward_import_is_found_with_its_file(tmp_path: Path) -> None:
    """The check itself, on a small tree: an import inside a function closes the circle."""
    app = tmp_path / "app"
    for package, source in {
        "low": "import json\n",
        "high": "from app.low import thing\n",
    }.items():
        (app / package).mkdir(parents=True)
        (app / package / "module.py").write_text(source)
    assert cycle_in(imported_units(app)) == []
    (app / "low" / "late.py").write_text("def f():\n    from app.high.module import g\n")
    cycle = cycle_in(imported_units(app))
    assert len(cycle) == 2
    assert "low -> high (app/low/late.py)" in cycle, cycle


def test_the_plumbing_imports_no_domain() -> None:
    graph = imported_units()
    domains = {unit for unit in graph if (APP / unit).is_dir()} - PLUMBING - ROOTS
    wrong = {
        f"{unit} -> {target}: {', '.join(sorted(files))}"
        for unit in PLUMBING
        for target, files in graph[unit].items()
        if target in domains or target in ROOTS
    }
    assert not wrong, "plumbing imports a domain:\n" + "\n".join(sorted(wrong))


def test_nothing_imports_the_composition_root() -> None:
    graph = imported_units()
    wrong = {
        f"{unit} -> {target}"
        for unit, targets in graph.items()
        for target in targets
        if target in ROOTS and unit not in ROOTS
    }
    assert not wrong, sorted(wrong)


def test_every_service_an_endpoint_names_is_built() -> None:
    """``service("tasks")`` is looked up by name when a request comes: a misspelt name would be
    a 500, so every name used in app/ must be a field of the services the lifespan builds."""
    built = {field.name for field in dataclasses.fields(Services)}
    named: set[str] = set()
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "service"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                named.add(node.args[0].value)
    assert named, "no endpoint names a service: the check reads nothing"
    assert named <= built, sorted(named - built)
