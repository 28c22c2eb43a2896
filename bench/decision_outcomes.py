"""Outcomes of the restart decisions on the real-world failure corpus (issue 26; a benchmark, not a test).

Replays every entry of `monitoring/corpus/*.jsonl` (whatever batches exist) through the real
decision path, `monitoring/corpus/outcomes.py`: classifier, failure points, history,
`core.policy.decide`, as a job with one worker and 3 restarts allowed. Each attempt prints step
lines and then fails with the entry's log; a transient fault (source verdict retryable) happens
on the first attempt only and the next attempt trains to the end; a bug (not retryable) happens
again on every attempt, at the same step after the same progress lines. The bug's reruns are
varied: unchanged, resumed from a checkpoint (re-doing steps 11-20 and failing at step 20
again), and placed on another node each time. torchrun's rule (`--max-restarts=3`: restart every
failure until spent) is replayed on the same sequences in the same run.

Prints, on the whole corpus, on the training part (what signature writers may read), on the
held-back part (the held-back 30 % and every batch >= 2, never read by them) and per batch:
recovered % of retryable faults, futile restarts per not-retryable fault and the worst single
one, and first-verdict agreement (secondary); and, apart, the calibration batch, whose entries the
verdict counts are taken on (monitoring/corpus/verdict_table.py), so its row is not a measure. Misses of held-back entries are counted but
listed only with --show-held-back, so rules are never written from them.

--frontier also replays the corpus with other ambiguity cuts (core.kinds.AMBIGUOUS_SHARE, the
share of public reports against a verdict from which it is probed): the trade-off between the
two targets that a cut alone can buy, to tell a threshold problem from a missing signature.

--ceiling prints an upper bound: the best that any verdict per catalog rule, or per evidence class
(the HTTP status, errno, exception class or family a verdict's line is keyed by), could reach on
each part, the verdicts chosen with the sources' answers in hand (outcomes.ceiling). Where it
misses a target, no cut, count or verdict over those keys meets it: only evidence they do not
read can.

Run:  .venv/bin/python bench/decision_outcomes.py [--show-held-back] [--quick] [--frontier] [--ceiling]
Targets (held-back part, every scenario): recovered >= 98 %, <= 0.25 futile restarts per
not-retryable fault, never more than 1 on one fault. Exit 1 when a target is missed.
"""

from __future__ import annotations

import _path  # noqa: F401  (first: the repository root on sys.path; bench/_path.py)
import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator

from classify_corpus import _commit, _machine  # the same "what ran, on what machine" lines
import core.kinds
from monitoring.corpus import evaluate, outcomes

TARGETS = {"recovered": 0.98, "futile_per_bug": 0.25, "worst": 1}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _row(label: str, replays: list[outcomes.Replay]) -> str:
    f = outcomes.figures(replays)
    return (
        f"  {label:<13} n={f.entries:<4} recovered {_pct(f.recovered_share):>6} ({f.recovered}/{f.retryable})"
        f"   futile/bug {_num(f.futile_per_bug):>5} (worst {f.worst})"
        f"   first-verdict agreement {_pct(f.first_agreement):>6}"
        f"   | torchrun: recovered {_pct(1.0 if f.retryable else None):>6}, futile/bug "
        f"{_num(outcomes.RESTARTS if f.not_retryable else None)} (worst {outcomes.RESTARTS if f.not_retryable else 0})"
    )


FRONTIER_CUTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


@contextlib.contextmanager
def _ambiguity_cut(share: float) -> Iterator[None]:
    """The decision path with another AMBIGUOUS_SHARE (read by core.kinds.verdict_of at each call)."""
    committed = core.kinds.AMBIGUOUS_SHARE
    core.kinds.AMBIGUOUS_SHARE = share
    try:
        yield
    finally:
        core.kinds.AMBIGUOUS_SHARE = committed


def _frontier(entries: list[evaluate.Entry], scenarios: tuple[str, ...]) -> None:
    print()
    print("frontier: the same replay with other ambiguity cuts (the worst scenario of each part)")
    for share in FRONTIER_CUTS:
        parts = []
        with _ambiguity_cut(share):
            for label, held in (("training", False), ("held back", True)):
                part = [e for e in entries if outcomes.held_back(e) is held]
                figs = [outcomes.figures(outcomes.replay_all(part, s)) for s in scenarios]
                recovered = min(f.recovered_share or 0.0 for f in figs)
                futile = max(f.futile_per_bug or 0.0 for f in figs)
                parts.append(f"{label}: recovered {_pct(recovered):>6}, futile/bug {_num(futile)}")
        committed = " (committed)" if share == core.kinds.AMBIGUOUS_SHARE else ""
        print(f"  cut {share:<4} {'   '.join(parts)}{committed}")


def _ceiling(replays: list[outcomes.Replay]) -> None:
    print()
    print(
        "ceiling: the best any verdict per key could do, chosen knowing the sources' answers "
        f"(targets: recovered >= {TARGETS['recovered']:.0%}, futile/bug <= {TARGETS['futile_per_bug']})"
    )
    parts = (
        ("held back", [r for r in replays if outcomes.held_back(r.entry)]),
        ("training", [r for r in replays if not outcomes.held_back(r.entry)]),
        ("whole", replays),
    )
    for name, key in outcomes.CEILING_KEYS.items():
        for label, part in parts:
            c = outcomes.ceiling(part, key, TARGETS["recovered"], TARGETS["futile_per_bug"])
            print(
                f"  by {name:<14} {label:<10} {c.groups:>4} keys: at >= 98% recovered, futile/bug "
                f"{_num(c.futile_per_bug)}; at <= 0.25 futile/bug, recovered {_pct(c.recovered)}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-held-back", action="store_true", help="also list the held-back part's misses")
    parser.add_argument("--quick", action="store_true", help="every 7th entry and one scenario: the same labels")
    parser.add_argument("--frontier", action="store_true", help="also replay with other ambiguity cuts")
    parser.add_argument("--ceiling", action="store_true", help="also print the best any verdict per key could do")
    args = parser.parse_args(argv)

    entries = evaluate.load_corpus()
    scenarios = outcomes.SCENARIOS[:1] if args.quick else outcomes.SCENARIOS
    if args.quick:
        entries = entries[::7]
    print(
        f"decision outcomes: {len(entries)} corpus entries{' (--quick: every 7th)' if args.quick else ''}, "
        f"replayed with --max-num-of-job-restart={outcomes.RESTARTS}, scenarios: {', '.join(scenarios)}"
    )
    print(f"code: {_commit()}")
    print(f"machine: {_machine()}")
    held = [e for e in entries if outcomes.held_back(e)]
    print(f"held back: {len(held)} entries (holdout, and every batch >= {evaluate.FRESH_BATCH})")
    counts = json.loads(core.kinds.COUNTS_PATH.read_text(encoding="utf-8"))
    calibration = evaluate.load_calibration()
    print(
        f"verdict counts: {counts['training_entries']} training entries a signature of their own decided, "
        f"{counts['calibration_entries']} calibration entries (counted, never measured)"
    )
    met = True
    for scenario in scenarios:
        started = time.perf_counter()
        replays = outcomes.replay_all(entries, scenario)
        took = time.perf_counter() - started
        attempts = sum(r.restarts + 1 for r in replays)
        print()
        print(f"scenario: {scenario} ({attempts} attempts decided in {took:.2f} s)")
        held_part = [r for r in replays if outcomes.held_back(r.entry)]
        print(_row("whole", replays))
        print(_row("training", [r for r in replays if not outcomes.held_back(r.entry)]))
        print(_row("held back", held_part))
        print(_row("holdout", [r for r in replays if r.entry.holdout]))
        for batch in sorted({r.entry.batch for r in replays}):
            print(_row(f"batch {batch}", [r for r in replays if r.entry.batch == batch]))
        if calibration and not args.quick:
            print(_row("calibration", outcomes.replay_all(calibration, scenario)) + "  (counted: not a measure)")
        f = outcomes.figures(held_part)
        ok = (
            f.recovered_share is not None
            and f.recovered_share >= TARGETS["recovered"]
            and (f.futile_per_bug or 0) <= TARGETS["futile_per_bug"]
            and f.worst <= TARGETS["worst"]
        )
        met = met and ok
        print(
            f"  targets on the held-back part: recovered {_pct(f.recovered_share)} (>= 98%), "
            f"futile/bug {_num(f.futile_per_bug)} (<= 0.25), worst {f.worst} (<= 1): {'met' if ok else 'MISSED'}"
        )
        misses = [r for r in replays if r.recovered != r.entry.retryable or r.futile]
        hidden = [r for r in misses if outcomes.held_back(r.entry)]
        shown = misses if args.show_held_back else [r for r in misses if not outcomes.held_back(r.entry)]
        print(
            f"  misses: {len(misses)}"
            + (f" ({len(hidden)} held back, not listed)" if hidden and not args.show_held_back else "")
        )
        for r in shown:
            what = "not recovered" if r.entry.retryable else f"{r.futile} futile restart(s)"
            print(f"    {r.entry.id:<24} {what:<22} rule {r.first.rule}; {r.last_reason[:140]}")
    if args.frontier:
        _frontier(entries, scenarios)
    if args.ceiling:
        _ceiling(outcomes.replay_all(entries, scenarios[0]))
    print()
    print(f"targets {'met' if met else 'MISSED'} (held-back part, every scenario)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
