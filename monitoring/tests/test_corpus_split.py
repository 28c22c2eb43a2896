"""The held-back split of the failure corpus: fixed by the id alone, idempotent; and the
fresh batch (entries gathered after the signatures were written), scored apart."""

import json

import pytest

from monitoring.corpus import evaluate, split


def _write(path, entries):
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")


def test_split_marks_every_entry_by_its_id_alone_and_a_rerun_changes_nothing(tmp_path):
    ids = [f"gpu-{i:03d}" for i in range(1, 201)]
    _write(tmp_path / "gpu.jsonl", [{"id": i, "log": "Xid 79 — ü"} for i in ids])
    assert split.main(["--dir", str(tmp_path)]) == 0
    first = (tmp_path / "gpu.jsonl").read_text(encoding="utf-8")
    entries = [json.loads(line) for line in first.splitlines()]
    assert [e["holdout"] for e in entries] == [split.is_holdout(i) for i in ids]
    assert 0.2 < sum(e["holdout"] for e in entries) / len(entries) < 0.4
    assert list(entries[0]) == ["id", "log", "holdout"]
    assert "ü" in first  # written as the corpus is, without \u escapes
    assert split.main(["--dir", str(tmp_path), "--check"]) == 0
    split.main(["--dir", str(tmp_path)])
    assert (tmp_path / "gpu.jsonl").read_text(encoding="utf-8") == first


def test_a_new_entry_or_a_wrong_mark_is_found_by_check_and_fixed(tmp_path):
    held = next(f"nan-{i:03d}" for i in range(1, 100) if split.is_holdout(f"nan-{i:03d}"))
    _write(tmp_path / "nan.jsonl", [{"id": held, "holdout": False}, {"id": "nan-999"}])
    assert split.main(["--dir", str(tmp_path), "--check"]) == 1
    assert split.main(["--dir", str(tmp_path)]) == 0
    marks = [json.loads(line)["holdout"] for line in (tmp_path / "nan.jsonl").read_text().splitlines()]
    assert marks == [True, split.is_holdout("nan-999")]


def _entry(entry_id: str, **extra):
    return {
        "id": entry_id,
        "family": "gpu",
        "source": "https://example.org/issue/1",
        "framework": "nccl",
        "log": "some failure",
        "exit_code": None,
        "signal": None,
        "backend_reason": None,
        "verdict": "retryable",
        "why": "a stated cause",
        **extra,
    }


def test_batch_defaults_to_1_and_the_fresh_batch_is_scored_apart(tmp_path):
    _write(
        tmp_path / "gpu.jsonl",
        [_entry("gpu-001"), _entry("gpu-002", batch=2), _entry("gpu-003", batch=2, verdict="not-retryable")],
    )
    entries = evaluate.load_corpus(tmp_path)
    assert [e.batch for e in entries] == [1, 2, 2]
    s = evaluate.score(evaluate.run(entries))
    assert [o.entry.id for o in s.fresh] == ["gpu-002", "gpu-003"]
    assert s.fresh_agreement == sum(o.agrees for o in s.fresh) / 2
    assert s.fresh_false_retryable_rate == float(s.fresh[1].classification.retryable)


@pytest.mark.parametrize("batch", [0, -1, "2", 1.5, True, None])
def test_a_malformed_batch_is_an_error_naming_the_file_line_and_field(tmp_path, batch):
    _write(tmp_path / "gpu.jsonl", [_entry("gpu-001"), _entry("gpu-002", batch=batch)])
    with pytest.raises(ValueError, match=r"^gpu\.jsonl:2: batch "):
        evaluate.load_corpus(tmp_path)
