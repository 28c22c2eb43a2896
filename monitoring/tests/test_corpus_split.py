"""The held-back split of the failure corpus: fixed by the id alone, idempotent."""

import json

from monitoring.corpus import split


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
