"""The benchmarks still run: ``python -m bench --quick`` (every benchmark, tiny sizes) against
real service processes, each writing its results file. Their numbers are not checked: timing
belongs to the benchmarks, never to tests (SPEC §13)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import readme
from bench.__main__ import BENCHMARKS
from bench.harness import REPO, RESULTS_DIR
from tests.support.settings import service_env

# The benchmarks make their own SQLite databases; once per suite is enough.
pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only]


@pytest.mark.timeout(600)
def test_every_benchmark_runs_and_writes_its_tables(tmp_path: Path) -> None:
    committed = {p.name: p.read_bytes() for p in RESULTS_DIR.glob("*.json")}
    bench_readme = readme.README.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--results", str(tmp_path)],
        cwd=REPO,
        env=service_env(),  # its services run as deployed
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in BENCHMARKS:
        document = json.loads((tmp_path / f"{name}.json").read_text())
        assert document["benchmark"] == name
        assert document["quick"] is True
        assert document["machine"]["cpus"] >= 1
        assert document["tables"], name
        for table in document["tables"]:
            assert table["rows"], (name, table["title"])
            assert all(len(row) == len(table["columns"]) for row in table["rows"]), name
            assert table["title"] in done.stdout  # printed too
        assert document["data"], name
    rendered = readme.render(tmp_path, BENCHMARKS)
    assert all(f"### {name}" in rendered for name in BENCHMARKS)
    # A quick run never overwrites the committed results or their tables in bench/README.md.
    assert {p.name: p.read_bytes() for p in RESULTS_DIR.glob("*.json")} == committed
    assert readme.README.read_bytes() == bench_readme
