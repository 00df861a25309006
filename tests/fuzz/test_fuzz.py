"""A sample of the fuzzer in the regular suite: fresh random conversations on every run.

The seed is printed (``-s`` shows it; a failure names it): ``FUZZ_SEED=<seed> pytest
tests/fuzz`` plays the same sample again, ``python -m tests.fuzz --replay <conversation seed>``
one conversation. ``make fuzz`` plays ten thousand.
"""

import os
import random

import pytest

from tests.fuzz.driver import abridged
from tests.fuzz.model import Options, conversation
from tests.fuzz.runner import Report, run_one

SAMPLE = 30


@pytest.mark.sqlite_only  # the fuzzer reads the SQLite head row itself
def test_random_conversations_keep_the_invariants() -> None:
    """Budget, pairing, append-only history, rebuildable current.jsonl and head, markers with
    their summaries, acknowledged seqs kept, refusals that wrote nothing: after every step."""
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(1, 1 << 31))
    print(f"FUZZ_SEED={seed}")
    report = Report([run_one(seed + i, Options()) for i in range(SAMPLE)], seconds=0.0)
    failures = report.distinct_failures()
    assert not failures, f"FUZZ_SEED={seed}: {len(failures)} distinct failures\n\n" + "\n\n".join(
        f"=== {signature} (seeds {[r.seed for r in results]})\n{results[0].failure}"
        for signature, results in failures.items()
    )
    assert sum(r.steps for r in report.results) >= SAMPLE * 2


# Conversations the fuzzer once broke, played on every run.
FOUND = {
    # A 1k window: elisions that each freed a few tokens spent fit's rounds while truncation
    # waited for a gain of MIN_GAIN_SHARE: 413.
    104907547: "small elisions spent the rounds",
    # A 665-token budget: truncations hiding small messages freed ~55 tokens each and spent
    # the rounds while an elision would have fit: 413.
    289539144: "small truncations spent the rounds",
    # The same budget: a truncation set aside for freeing a few tokens was not tried again
    # once elision had nothing left to cut: 413.
    4550: "a stalled truncation came back after elision ran dry",
    # A 1k window shrunk by calibration to 293 counted tokens: the head, a summary and a
    # pending call, each cut to its bone, cost ~417: 413. Since elisions cut down to the
    # message cap at once, the payload the usage answers is smaller, the report is more than
    # four times it and ignored, and the budget is not shrunk: the case itself (what a payload
    # must keep costing more than a calibrated budget) is no longer reached by this seed.
    9442: "kept parts over a calibrated budget",
    # A 226-token calibrated budget, six tokens over after the background condense had kept
    # only the newest message: nothing to truncate, and no message over 64 tokens to elide
    # for a gain of 16: 413. Once nothing else can change the context, any message and any
    # gain will do for an elision.
    1173755134: "small gains refused when nothing else was left",
    # A thread of 0.3 of a 1k window (307 tokens, 128 of them reserved for the answer): its
    # first instruction and newest tool group, each cut to its bone, still came to 339 tokens
    # over a 237 budget: 413 at every payload. Such a thread is now refused when started.
    777069: "a thread too small for any payload",
}


@pytest.mark.sqlite_only
@pytest.mark.parametrize("seed", list(FOUND), ids=list(FOUND.values()))
def test_conversations_once_broken_keep_the_invariants(seed: int) -> None:
    result = run_one(seed, Options())
    assert not result.failure, result.failure


def test_a_seed_gives_the_same_conversation() -> None:
    """A failure's seed is all it takes to replay it: generation is deterministic."""
    first, again = conversation(7, Options()), conversation(7, Options())
    assert abridged(first.steps) == abridged(again.steps)
    assert first.task == again.task
    assert abridged(conversation(8, Options()).steps) != abridged(first.steps)


def test_reserved_fields_are_in_by_default_and_can_be_left_out() -> None:
    """Hostile messages carry reserved names (marker, seq...) unless the run leaves them out."""

    def reserved(options: Options) -> int:
        kinds = [
            step.get("kind")
            for seed in range(200)
            for step in conversation(seed, options).steps
            if step["op"] == "hostile"
        ]
        return kinds.count("reserved")

    assert reserved(Options()) > 0
    assert reserved(Options(reserved_fields=False)) == 0
