"""``python -m bench [NAME ...] [--quick] [--results DIR]``: run the benchmarks (all by default),
print their tables, write ``DIR/<name>.json`` and, after a full run into bench/results, the
tables in bench/README.md.

``--quick`` shrinks every benchmark to a smoke run (the test suite uses it): its numbers mean
nothing, so they never reach bench/README.md.
"""

import argparse
import importlib
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from bench import readme
from bench.harness import REPO, RESULTS_DIR, Report, run_facts

# In the order they run and bench/README.md shows them.
BENCHMARKS = (
    "appends",
    "condense_appends",
    "payloads",
    "tokens",
    "compaction",
    "replay",
    "retention",
    "startup",
    "stats_queries",
    "ui_pages",
    "proxy",
)


def run_one(name: str, quick: bool, results: Path) -> Report:
    module = importlib.import_module(f"bench.{name}")
    started = time.perf_counter()
    # Scratch space on the repository's disk (not a tmpfs): fsync costs what it costs there.
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-", dir=REPO) as scratch:
        report: Report = module.run(quick, Path(scratch))
    seconds = round(time.perf_counter() - started, 1)
    document = {
        "benchmark": name,
        **run_facts(),
        "quick": quick,
        "seconds": seconds,
        "tables": [asdict(t) for t in report.tables],
        "data": report.data,
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")
    for table in report.tables:
        print(f"\n{table.text()}", flush=True)
    print(f"\n[{name}: {seconds} s, written to {results / f'{name}.json'}]", flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", choices=[[], *BENCHMARKS], metavar="NAME")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="where to write")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    started = time.perf_counter()
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        run_one(name, args.quick, args.results)
    print(f"\nall done in {time.perf_counter() - started:.0f} s", flush=True)
    if not args.quick and args.results.resolve() == RESULTS_DIR.resolve():
        readme.update(RESULTS_DIR, BENCHMARKS)


if __name__ == "__main__":
    main()
