"""core/verdict_counts.json is what monitoring/corpus/verdict_table.py makes of today's corpus and catalog."""

from __future__ import annotations

from core.kinds import COUNTS_PATH
from monitoring.corpus import verdict_table


def test_the_committed_verdict_counts_are_not_stale():
    want = verdict_table.render(verdict_table.table())
    assert COUNTS_PATH.read_text(encoding="utf-8") == want, (
        "core/verdict_counts.json is stale against the corpus or the catalog: "
        "run .venv/bin/python monitoring/corpus/verdict_table.py"
    )


def test_only_training_entries_are_counted():
    table = verdict_table.table()
    from monitoring.corpus import evaluate

    entries = evaluate.load_corpus()
    assert table["training_entries"] == sum(not e.holdout and e.batch < evaluate.FRESH_BATCH for e in entries)
    assert sum(r["reports"] for r in table["rules"].values()) == table["training_entries"]
