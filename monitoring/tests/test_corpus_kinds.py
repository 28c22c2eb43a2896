"""core/verdict_counts.json is what monitoring/corpus/verdict_table.py makes of today's corpus and catalog."""

from __future__ import annotations

from dataclasses import replace

from core.kinds import COUNTS_PATH
from monitoring.corpus import evaluate, verdict_table

ENTRIES = evaluate.load_corpus()
CALIBRATION = evaluate.load_calibration()


def test_the_committed_verdict_counts_are_not_stale():
    want = verdict_table.render(verdict_table.table())
    assert COUNTS_PATH.read_text(encoding="utf-8") == want, (
        "core/verdict_counts.json is stale against the corpus or the catalog: "
        "run .venv/bin/python monitoring/corpus/verdict_table.py"
    )


def test_training_entries_a_signature_decided_and_every_calibration_entry_are_counted():
    table = verdict_table.table()
    training = [o for o in evaluate.run(e for e in ENTRIES if verdict_table.training(e))]
    assert table["training_entries"] == sum(not verdict_table.fallback(o.classification) for o in training)
    assert table["calibration_entries"] == len(CALIBRATION)
    assert sum(r["reports"] for r in table["rules"].values()) == table["training_entries"] + len(CALIBRATION)


def test_what_only_a_fallback_decided_counts_from_the_calibration_batch_alone():
    # A real training entry that fell to the exit status: the writers left it to the fallback,
    # so as training material it says nothing of how often such failures are transient; the
    # same report gathered for calibration does.
    outcome = next(
        o
        for o in evaluate.run(e for e in ENTRIES if verdict_table.training(e))
        if o.classification.rule == "crashed-with-exit-code"
    )
    entry = outcome.entry
    alone = verdict_table.table([entry], [])
    assert alone["rules"].get("crashed-with-exit-code", {"reports": 0}) == {"reports": 0}
    assert alone["evidence"] == {} and alone["training_entries"] == 0
    as_calibration = replace(entry, holdout=False, batch=7, calibration=True)
    counted = verdict_table.table([], [as_calibration])
    assert counted["rules"]["crashed-with-exit-code"] == {"reports": 1, "retryable": int(entry.retryable)}
    assert counted["calibration_entries"] == 1


def test_a_training_entry_its_own_signature_decided_is_counted():
    outcome = next(
        o
        for o in evaluate.run(e for e in ENTRIES if verdict_table.training(e))
        if not verdict_table.fallback(o.classification)
    )
    table = verdict_table.table([outcome.entry], [])
    assert table["rules"][outcome.classification.rule]["reports"] == 1
    assert table["training_entries"] == 1


def test_held_back_entries_are_never_counted():
    held = [e for e in ENTRIES if not verdict_table.training(e)]
    table = verdict_table.table(held, [])
    assert table["training_entries"] == 0 and table["calibration_entries"] == 0
    assert all(r["reports"] == 0 for r in table["rules"].values())
