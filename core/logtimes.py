"""When each line of an instance log was captured (pure).

The node side (jobs/backends/shim.py) watches the log it owns and, whenever the
file has grown, appends one record to a sidecar file beside the log
(`<log>.times`): the log's size then and the time it saw it. A line ending at
byte `e` was captured by the first record whose size is >= e, so its capture
time is that record's time (at most one watch interval late). Records are fixed
size and their sizes only grow, so the record for any offset is found by binary
search, and a job printing 10k lines a second costs one record per interval,
not one per line.

Everything here works over a `read(offset, limit) -> bytes` of the sidecar, as
`core.logindex` does over the log.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime

SUFFIX = ".times"
RECORD = struct.Struct("<Qd")  # log size in bytes, capture time (epoch seconds)

Reader = Callable[[int, int], bytes]


def record(size: int, when: float) -> bytes:
    return RECORD.pack(size, when)


def _at(read: Reader, index: int) -> tuple[int, float] | None:
    data = read(index * RECORD.size, RECORD.size)
    return RECORD.unpack(data) if len(data) == RECORD.size else None


def first_record_covering(read: Reader, count: int, end: int) -> int:
    """The index of the first record whose size is >= `end` (`count` when none)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        rec = _at(read, mid)
        if rec is None or rec[0] >= end:
            hi = mid
        else:
            lo = mid + 1
    return lo


def line_times(read: Reader, sidecar_size: int, offset: int, chunk: bytes) -> list[float | None]:
    """The capture time of each line of `chunk` (log bytes from `offset`), None for
    a line no record covers yet."""
    count = sidecar_size // RECORD.size
    ends = []
    pos = chunk.find(b"\n")
    while pos >= 0:
        ends.append(offset + pos + 1)
        pos = chunk.find(b"\n", pos + 1)
    if not chunk.endswith(b"\n") and chunk:
        ends.append(offset + len(chunk))
    if not ends:
        return []
    index = first_record_covering(read, count, ends[0])
    # The records this chunk needs, read in one go: they follow each other.
    last = first_record_covering(read, count, ends[-1])
    span = read(index * RECORD.size, (min(last, count - 1) - index + 1) * RECORD.size) if index < count else b""
    records = [RECORD.unpack_from(span, k) for k in range(0, len(span) - len(span) % RECORD.size, RECORD.size)]
    out: list[float | None] = []
    k = 0
    for end in ends:
        while k < len(records) and records[k][0] < end:
            k += 1
        out.append(records[k][1] if k < len(records) else None)
    return out


def covered(read: Reader, sidecar_size: int) -> tuple[int, float] | None:
    """(log size, time) of the last record, or None before the first."""
    count = sidecar_size // RECORD.size
    return _at(read, count - 1) if count else None


def stamped(chunk: bytes, times: list[float | None]) -> bytes:
    """`chunk`'s lines, each after its capture time (ISO 8601 UTC, milliseconds)
    and a space, or "-" when it has none: a download that agrees with the page."""
    lines = chunk.split(b"\n")
    tail = lines.pop() if lines and lines[-1] == b"" else None
    out = []
    for k, line in enumerate(lines):
        t = times[k] if k < len(times) else None
        stamp = (
            (datetime.fromtimestamp(round(t, 3), UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] + "Z")
            if t is not None
            else "-"
        )
        out.append(stamp.encode() + b" " + line)
    return b"\n".join(out) + (b"\n" if tail is not None else b"")
