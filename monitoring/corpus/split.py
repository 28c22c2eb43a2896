"""Mark the held-back part of the failure corpus (issue 13).

A deterministic 30 % of the entries of every `<family>.jsonl` file in this directory is
held back while catalog signatures are written: an entry is held back when the first 8
bytes of sha256(id), read as a fraction of 2**64, are below 0.30. The choice depends on
the id alone, so it was fixed before anyone looked at the entries, it does not change when
entries are added, and rerunning the script after every corpus landing only adds the
field to new entries (it is idempotent: a file already marked is rewritten byte for byte).

    python monitoring/corpus/split.py            # mark every file in place
    python monitoring/corpus/split.py --check    # exit 1 if some entry is unmarked or wrong

Lines are rewritten with json.dumps(..., ensure_ascii=False), the corpus's own format, and
key order is kept ("holdout" goes last).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HOLDOUT_FRACTION = 0.30
CORPUS_DIR = Path(__file__).resolve().parent


def is_holdout(entry_id: str) -> bool:
    digest = hashlib.sha256(entry_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HOLDOUT_FRACTION


def corpus_files(directory: Path = CORPUS_DIR) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


def mark_file(path: Path, *, check: bool = False) -> tuple[int, int, int]:
    """(entries, held back, lines that needed a change) for one file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, held, changed = [], 0, 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path.name}:{number}: not JSON ({exc})") from exc
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise SystemExit(f'{path.name}:{number}: an entry needs a string "id"')
        want = is_holdout(entry["id"])
        held += want
        if entry.get("holdout") is not want:
            changed += 1
            entry.pop("holdout", None)
            entry["holdout"] = want
        out.append(json.dumps(entry, ensure_ascii=False))
    text = "\n".join(out) + ("\n" if out else "")
    if not check and text != path.read_text(encoding="utf-8"):
        path.write_text(text, encoding="utf-8")
    return len(out), held, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if a file needs marking")
    parser.add_argument("--dir", type=Path, default=CORPUS_DIR)
    args = parser.parse_args(argv)
    total = held_total = changed_total = 0
    for path in corpus_files(args.dir):
        n, held, changed = mark_file(path, check=args.check)
        total, held_total, changed_total = total + n, held_total + held, changed_total + changed
        print(f"{path.name}: {n} entries, {held} held back, {changed} {'to mark' if args.check else 'marked'}")
    print(f"total: {total} entries, {held_total} held back ({held_total / total:.0%})" if total else "total: 0 entries")
    return 1 if args.check and changed_total else 0


if __name__ == "__main__":
    sys.exit(main())
