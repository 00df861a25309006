"""python -m tests.fuzz: play random conversations against the real app, in parallel.

    python -m tests.fuzz --conversations 10000 --workers 2      # what `make fuzz` runs
    python -m tests.fuzz --minutes 5 --seed 1234                 # as many as fit in 5 minutes
    python -m tests.fuzz --replay 1234007                        # one conversation, its trace

Prints the seed, the count and the time; each distinct failure with the seed and the steps
that reproduce it. Exits 1 when something broke.
"""

import argparse
import os
import random
import signal
import sys
import time
from collections import Counter

from tests.fuzz.driver import abridged
from tests.fuzz.model import Options, conversation
from tests.fuzz.runner import Report, Run, run_many, run_one

SHOWN_STATUSES = 40


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--conversations", type=int, default=200, help="how many (default 200)")
    parser.add_argument("--minutes", type=float, help="stop starting new ones after this long")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--seed", type=int, help="the run's seed (default: FUZZ_SEED, else a random one)"
    )
    parser.add_argument("--max-steps", type=int, default=Options.max_steps)
    parser.add_argument(
        "--no-reserved-fields",
        action="store_true",
        help="leave out extra fields with reserved names (marker, seq...) to explore the rest",
    )
    parser.add_argument("--replay", type=int, metavar="SEED", help="play one conversation")
    args = parser.parse_args(argv)
    options = Options(max_steps=args.max_steps, reserved_fields=not args.no_reserved_fields)
    if args.replay is not None:
        return replay(args.replay, options)
    seed = args.seed if args.seed is not None else int(os.environ.get("FUZZ_SEED") or 0)
    seed = seed or random.SystemRandom().randrange(1, 1 << 31)
    print(
        f"fuzz: seed {seed}, {args.conversations} conversations, {args.workers} workers"
        + (f", at most {args.minutes:g} min" if args.minutes else "")
        + ("" if options.reserved_fields else ", no reserved fields"),
        flush=True,
    )
    # Ctrl-C or a TERM ends the run with a report of what was played (also when started in
    # the background, where SIGINT comes ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run = Run(seed, args.conversations, args.workers, options, args.minutes)
    every = max(1, args.conversations // 20)

    def progress(done: int, failed: int, seconds: float) -> None:
        if done % every == 0 or done == args.conversations:
            print(f"  {done} done, {failed} failed, {seconds:.0f} s", flush=True)

    report = run_many(run, progress)
    return summarise(seed, report)


def summarise(seed: int, report: Report) -> int:
    played = report.played
    steps = sum(r.steps for r in played)
    statuses: Counter[str] = Counter()
    for result in played:
        statuses.update(result.statuses)
    print(
        f"\nrequests (status, error code) and the histories' markers, the {SHOWN_STATUSES} most"
        " common:"
    )
    for name, count in statuses.most_common(SHOWN_STATUSES):
        print(f"  {count:8d}  {name}")
    groups = report.distinct_failures()
    for signature, results in groups.items():
        print(f"\n=== FAILURE x{len(results)}: {signature}")
        print(f"seeds: {' '.join(str(r.seed) for r in results[:10])}")
        print(results[0].failure)
    print(
        f"\nfuzz: seed {seed}: {len(played)} conversations ({steps} steps) in "
        f"{report.seconds:.0f} s, {len(report.failures)} failed "
        f"({len(groups)} distinct); {len(report.results) - len(played)} not started (time)"
        + (", interrupted" if report.interrupted else "")
    )
    return 1 if report.failures else 0


def replay(seed: int, options: Options) -> int:
    played = conversation(seed, options)
    print(f"conversation seed {seed}: task {abridged(played.task)}")
    for index, step in enumerate(played.steps):
        print(f"  {index}: {abridged(step)}")
    began = time.monotonic()
    result = run_one(seed, options)
    print(f"\n{result.steps} steps in {time.monotonic() - began:.1f} s")
    if result.failure:
        print(result.failure)
        return 1
    print("every invariant held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
