from core import logtimes


def reader(data: bytes):
    return lambda offset, limit: data[offset : offset + limit]


def test_each_line_takes_the_time_of_the_first_record_that_covers_its_end():
    log = b"a\nbb\nccc\ndddd\n"
    side = logtimes.record(2, 10.0) + logtimes.record(9, 11.0) + logtimes.record(14, 12.5)
    read = reader(side)
    assert logtimes.line_times(read, len(side), 0, log) == [10.0, 11.0, 11.0, 12.5]
    assert logtimes.line_times(read, len(side), 5, log[5:]) == [11.0, 12.5]
    assert logtimes.covered(read, len(side)) == (14, 12.5)


def test_a_line_no_record_covers_yet_has_no_time():
    log = b"a\nbb\n"
    side = logtimes.record(2, 10.0)
    assert logtimes.line_times(reader(side), len(side), 0, log) == [10.0, None]
    assert logtimes.line_times(reader(b""), 0, 0, log) == [None, None]
    assert logtimes.covered(reader(b""), 0) is None


def test_a_partial_record_at_the_end_is_ignored():
    side = logtimes.record(2, 10.0) + logtimes.record(5, 11.0)[:7]
    assert logtimes.line_times(reader(side), len(side), 0, b"a\nbb\n") == [10.0, None]


def test_a_stamped_download_puts_each_lines_capture_time_first():
    assert logtimes.stamped(b"a\nbb\n", [0.5, None]) == b"1970-01-01T00:00:00.500Z a\n- bb\n"
    assert logtimes.stamped(b"a\nlast", [1.0, 2.0]) == b"1970-01-01T00:00:01.000Z a\n1970-01-01T00:00:02.000Z last"
