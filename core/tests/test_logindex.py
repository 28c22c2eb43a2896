"""The log indexer: line numbers, batches and targets over a read(offset, limit)."""

from __future__ import annotations

from core import logindex


def test_only_whole_lines_are_sent_unless_a_line_grows_too_long():
    from core.logindex import MAX_PARTIAL_LINE, complete_lines, split_lines

    assert complete_lines(b"a\nb\npartial") == b"a\nb\n"
    assert complete_lines(b"partial") == b""
    assert complete_lines(b"x" * MAX_PARTIAL_LINE) == b"x" * MAX_PARTIAL_LINE
    assert complete_lines(b"a\nlast words", final=True) == b"a\nlast words"  # a finished attempt's end
    assert split_lines(b"one\n\ntwo\n") == ["one", "", "two"]
    assert split_lines("naïve ✓\n".encode()) == ["naïve ✓"]


def test_a_first_view_of_a_long_log_starts_at_a_line_boundary_near_the_end():
    from core.logindex import INITIAL_TAIL_BYTES, start_offset

    assert start_offset(100, b"") == 0
    size = INITIAL_TAIL_BYTES + 1000
    head = b"tail of a line\nnext line\n"
    assert start_offset(size, head) == 1000 + len(b"tail of a line\n")


def reader_of(data: bytes, chunk_reads: list | None = None):
    def read(offset, limit):
        if chunk_reads is not None:
            chunk_reads.append(limit)
        return data[offset : offset + limit]

    return read


def test_line_numbers_and_offsets_agree_across_scan_chunks(monkeypatch):
    from core import logindex

    monkeypatch.setattr(logindex, "SCAN_CHUNK", 7)  # lines straddle every chunk boundary
    data = b"".join(f"line {i}\n".encode() for i in range(1, 41))
    read = reader_of(data)
    for n in (1, 2, 9, 10, 40):
        start = logindex.offset_of_line(read, n)
        assert data[start:].startswith(f"line {n}\n".encode())
        assert logindex.line_at_offset(read, start) == n
        assert logindex.line_at_offset(read, start + 3) == n  # inside the line
    assert logindex.offset_of_line(read, 41) is None  # past the last line
    assert logindex.count_lines(read) == 40
    assert logindex.count_lines(reader_of(data + b"no newline yet")) == 41


def test_a_known_line_is_counted_from_where_the_last_count_stopped(monkeypatch):
    from core import logindex

    monkeypatch.setattr(logindex, "SCAN_CHUNK", 64)
    data = b"".join(f"{i:07d}\n".encode() for i in range(2000))  # 8 bytes a line
    marks = logindex.LineMarks()
    assert logindex.line_at_offset(reader_of(data), 8000, marks, "/logs/a") == 1001
    reads = []
    assert logindex.line_at_offset(reader_of(data, reads), 8800, marks, "/logs/a") == 1101
    assert sum(reads) == 800  # only the bytes after the remembered point
    assert logindex.offset_of_line(reader_of(data), 1500, marks, "/logs/a") == 1499 * 8
    reads = []
    assert logindex.line_at_offset(reader_of(data, reads), 8800, logindex.LineMarks(), "/logs/a") == 1101
    assert sum(reads) == 8800  # another cache knows nothing: counted from byte 0


def test_the_first_error_line_is_found_whole_even_across_chunks(monkeypatch):
    from core import logindex

    monkeypatch.setattr(logindex, "SCAN_CHUNK", 16)
    data = b"step 1 ok\nstep 2 ok and a long tail\nTraceback (most recent call last):\nValueError: x\n"
    start = logindex.first_match(reader_of(data))
    assert data[start:].startswith(b"Traceback")
    assert logindex.first_match(reader_of(b"all good\n" * 50)) is None
    assert logindex.resolve_target(reader_of(b"all good\n" * 50), {"first_error": True})[0] is None


def test_a_target_starts_the_stream_some_lines_before_it():
    from core.logindex import TARGET_CONTEXT, resolve_target

    data = b"".join(f"line {i}\n".encode() for i in range(1, 501))
    read = reader_of(data)
    line, start, start_line, why = resolve_target(read, {"line": 300})
    assert (line, start_line, why) == (300, 300 - TARGET_CONTEXT, "")
    assert data[start:].startswith(f"line {300 - TARGET_CONTEXT}\n".encode())
    offset = data.index(b"line 7\n")
    assert resolve_target(read, {"offset": offset})[:3] == (7, 0, 1)
    missing = resolve_target(read, {"line": 9000})
    assert missing[0] is None and missing[3] == "the log has 500 lines"


def test_line_marks_keep_the_furthest_point_of_the_logs_looked_at_last():
    marks = logindex.LineMarks(limit=2)
    marks.remember("a", 100, 5)
    marks.remember("a", 50, 3)  # an earlier point does not replace a later one
    assert marks.get("a") == (100, 5)
    marks.remember("b", 10, 2)
    marks.remember("c", 10, 2)
    assert marks.get("a") is None and marks.get("b") == (10, 2)  # the oldest went
    marks.remember(None, 10, 2)
    assert marks.get(None) is None


def test_the_quoted_line_is_found_at_its_offset_in_the_whole_log():
    log = b"x" * 1000 + b"step 5\nRuntimeError: CUDA out of memory. Tried\nmore\n"
    tail = log[-60:]
    offset = logindex.quoted_line_offset(tail, len(log), "oom: RuntimeError: CUDA out of memory. Tried…")
    assert offset == log.index(b"RuntimeError")
    assert logindex.quoted_line_offset(tail, len(log), "oom: not in the log") is None
    assert logindex.quoted_line_offset(b"", len(log), "oom: RuntimeError") is None
