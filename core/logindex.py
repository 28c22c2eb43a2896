"""Line numbers, batches and targets over one instance log (pure).

Everything here works over a `read(offset, limit) -> bytes` function, so the same
code counts lines of a local file, of a backend's remote log or of bytes in a
test; the shells (`jobs.logs.InstanceLog`) supply the reading.

Logs only grow, so an (offset, line) pair once counted stays true: `LineMarks`
remembers the furthest pair per log and the next count of that log starts there
instead of at byte 0.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable

INITIAL_TAIL_BYTES = 64 * 1024  # a first view of a log starts this far before the end
MAX_PARTIAL_LINE = 64 * 1024  # a line longer than this is sent without its newline
SCAN_CHUNK = 1024 * 1024  # bytes read at a time when counting lines or looking for an error
TARGET_CONTEXT = 100  # lines sent before a target line
# Generic "this looks like an error" for the `e` key when the classifier left no line.
ERROR_LINE = re.compile(rb"Traceback|Error|error:")

Reader = Callable[[int, int], bytes]


class LineMarks:
    """The furthest (offset, line) pair counted per log, for the `limit` logs
    looked at last."""

    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self.marks: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def get(self, key: str | None) -> tuple[int, int] | None:
        return self.marks.get(key) if key else None

    def remember(self, key: str | None, offset: int, line: int) -> None:
        if key is None:
            return
        have = self.marks.get(key)
        if have is None or have[0] < offset:
            self.marks[key] = (offset, line)
            self.marks.move_to_end(key)
            while len(self.marks) > self.limit:
                self.marks.popitem(last=False)


def complete_lines(data: bytes, final: bool = False) -> bytes:
    """The part of `data` that ends with a newline (all of it when a partial line
    has grown past MAX_PARTIAL_LINE or the stream is final)."""
    if final:
        return data
    cut = data.rfind(b"\n")
    if cut >= 0:
        return data[: cut + 1]
    return data if len(data) >= MAX_PARTIAL_LINE else b""


def split_lines(chunk: bytes) -> list[str]:
    text = chunk.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


def start_offset(size: int, head: bytes) -> int:
    """Where a first view of a long log starts: INITIAL_TAIL_BYTES before the end,
    moved forward to the start of the next whole line (`head` is the bytes there)."""
    start = max(0, size - INITIAL_TAIL_BYTES)
    if start == 0:
        return 0
    nl = head.find(b"\n")
    return start + nl + 1 if nl >= 0 else start


def line_at_offset(read: Reader, offset: int, marks: LineMarks | None = None, key: str | None = None) -> int:
    """The 1-based number of the line holding byte `offset` (newlines before it + 1)."""
    pos, line = 0, 1
    have = marks.get(key) if marks is not None else None
    if have and have[0] <= offset:
        pos, line = have
    while pos < offset:
        data = read(pos, min(SCAN_CHUNK, offset - pos))
        if not data:
            break
        line += data.count(b"\n")
        pos += len(data)
    if marks is not None:
        marks.remember(key, pos, line)
    return line


def offset_of_line(read: Reader, line: int, marks: LineMarks | None = None, key: str | None = None) -> int | None:
    """The byte offset where 1-based line `line` starts, or None past the last line."""
    if line <= 1:
        return 0
    pos, at = 0, 1
    have = marks.get(key) if marks is not None else None
    if have and have[1] < line:  # `have` may sit inside its line: only later lines are found from it
        pos, at = have
    while True:
        data = read(pos, SCAN_CHUNK)
        if not data:
            return None
        count = data.count(b"\n")
        if at + count >= line:
            cut = -1
            for _ in range(line - at):
                cut = data.index(b"\n", cut + 1)
            start = pos + cut + 1
            # A line "starts" at the end of the file only if something follows.
            if not read(start, 1):
                return None
            if marks is not None:
                marks.remember(key, start, line)
            return start
        at += count
        pos += len(data)


def count_lines(read: Reader) -> int:
    """How many lines the log has (a last line without its newline counts)."""
    pos, lines, last = 0, 0, b"\n"
    while True:
        data = read(pos, SCAN_CHUNK)
        if not data:
            return lines + (0 if last == b"\n" else 1)
        lines += data.count(b"\n")
        last = data[-1:]
        pos += len(data)


def first_match(read: Reader, pattern: re.Pattern[bytes] = ERROR_LINE) -> int | None:
    """The byte offset of the start of the first line matching `pattern`, or None.
    Reads whole lines at a time, so a match is never cut at a chunk boundary."""
    pos = 0
    while True:
        data = read(pos, SCAN_CHUNK)
        if not data:
            return None
        cut = data.rfind(b"\n")
        whole = data[: cut + 1] if cut >= 0 and len(data) == SCAN_CHUNK else data  # a longer line is searched in pieces
        m = pattern.search(whole)
        if m:
            return pos + whole.rfind(b"\n", 0, m.start()) + 1
        pos += len(whole)


def resolve_target(
    read: Reader, target: dict, marks: LineMarks | None = None, key: str | None = None
) -> tuple[int | None, int, int, str]:
    """(target line or None, byte offset and line number to stream from, why) for a
    target of the log view: {"line": N}, {"offset": byte} or {"first_error": true}."""
    why = ""
    line = None
    if "line" in target:
        if offset_of_line(read, target["line"], marks, key) is None:
            why = f"the log has {count_lines(read):,} lines"
        else:
            line = target["line"]
    elif "offset" in target:
        if target["offset"] > 0 and not read(target["offset"] - 1, 1):
            why = "the log is shorter than the recorded offset"
        else:
            line = line_at_offset(read, target["offset"], marks, key)
    else:
        offset = first_match(read)
        if offset is None:
            why = "no line matches Traceback, Error or error:"
        else:
            line = line_at_offset(read, offset, marks, key)
    if line is None:
        return None, 0, 1, why
    start_line = max(1, line - TARGET_CONTEXT)
    start = offset_of_line(read, start_line, marks, key)
    return line, start or 0, start_line, why


def parse_target(raw: object) -> dict | None:
    """A target from a client message, or None when it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("instance"), str):
        return None

    def whole(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    out = {"instance": raw["instance"]}
    if whole(raw.get("line")) and raw["line"] >= 1:
        out["line"] = raw["line"]
    elif whole(raw.get("offset")) and raw["offset"] >= 0:
        out["offset"] = raw["offset"]
    elif raw.get("first_error") is True:
        out["first_error"] = True
    else:
        return None
    return out


def quoted_line_offset(tail: bytes, size: int, message: str) -> int | None:
    """Where, in a log of `size` bytes ending with `tail`, the line starts that a
    classifier message quotes ("family: quoted text"), or None when it is not there."""
    if not tail:
        return None
    quote = message.split(": ", 1)[-1].strip().rstrip("…")[:80].encode()
    if not quote:
        return None
    pos = tail.rfind(quote)
    if pos < 0:
        return None
    line_start = tail.rfind(b"\n", 0, pos) + 1
    return size - len(tail) + line_start
