"""Crafted Flight Recorder dumps and the beat schedule's file mode (issue 31, finding 6).

A job writes its own Flight Recorder dumps, and the monitor reads them every tick for
C4D, the hang snapshot and the hang restart (monitoring/diagnose.c4d_input). So the
reader must turn any bytes into a trace or its one documented error (ValueError), and
the shell must skip that dump with a warning: one exception type leaking out made the
job's every tick fail instead."""

from __future__ import annotations

import glob
import logging
import os
import pickle
import stat
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.flight_recorder import load_dump, records_from_dump


def read(data: bytes):
    """What the monitor does with one rank's dump file, by the functions main has too."""
    return records_from_dump(load_dump(data))


def nested_lists(depth: int) -> bytes:
    """Pickle opcodes for a list nested `depth` deep: cheap to write, and str() or a
    recursive walk of it exhausts the stack."""
    return b"]" * depth + b"a" * (depth - 1)


def entry_pickle(**entry) -> bytes:
    return pickle.dumps({"entries": [entry]}, protocol=2)


ONE = {"collective_seq_id": 1, "profiling_name": "gloo:allreduce", "time_created_ns": 1}
MARKER = b"X\x06\x00\x00\x00MARKER"  # the BINUNICODE of "MARKER" in protocol 2

CRAFTED = {
    # Class-free pickles whose opcodes meet a value of the wrong type.
    "append to an int": b"K\x01]a.",
    "append to an int (text int)": b"I1\n)a.",
    "a list as a dict key": b"}]]s.",
    "a list as a dict key (protocol 4)": b"\x80\x04}\x94]\x94]\x94s.",
    "BUILD on a list": b"\x80\x04]\x94}b.",
    "an empty list (protocol 4)": b"\x80\x04]\x94.",
    "a list of a tuple": b"\x80\x04]\x94\x8c\x01a\x94\x85\x94a.",
    # A nested value where the group's name is shown: str() of it recursed.
    "a subgroup named by a deep list": entry_pickle(**ONE, process_group=["MARKER", "sub"], pg_id=1).replace(
        MARKER, nested_lists(200_000)
    ),
    # A timestamp too large for float(): the conversion to seconds overflowed.
    "an int beyond float": entry_pickle(**{**ONE, "time_created_ns": 10**400}, pg_id=0),
    "a completion beyond float": entry_pickle(**ONE, pg_id=0, time_discovered_completed_ns=10**400),
    # JSON nested deeper than the decoder's recursion allows.
    "deep JSON": b'{"entries": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "deep JSON objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "JSON of a huge int": b'{"entries": [{"collective_seq_id": 1, "profiling_name": "gloo:x", "time_created_ns": 1'
    + b"0" * 400
    + b', "pg_id": 0}]}',
}


@pytest.mark.parametrize("data", list(CRAFTED.values()), ids=list(CRAFTED))
def test_a_crafted_dump_is_refused_with_the_readers_own_error_only(data):
    try:
        trace = read(data)
    except ValueError as exc:
        assert str(exc).startswith("dump: ")
    else:
        assert all(isinstance(r.seq, int) for r in trace.records)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=256))
def test_any_bytes_give_a_trace_or_the_readers_own_error(data):
    try:
        read(data)
    except ValueError:
        pass


# Pickle opcodes that build only plain values, so the fuzzer reaches past the first byte.
PLAIN_OPCODES = [b"]", b"}", b")", b"(", b"a", b"e", b"s", b"u", b"t", b"l", b"d", b"b", b"N", b"\x88", b"\x89"]
PLAIN_OPCODES += [b"K\x01", b"K\x00", b"J\xff\xff\xff\x7f", b"\x8c\x07entries", b"\x8c\x04pg_id", b"\x85", b"\x86"]
PLAIN_OPCODES += [b"\x87", b"\x94", b"h\x00", b"q\x00", b"0", b"1", b"2", b"\x8a\x09" + b"\xff" * 9]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PLAIN_OPCODES), max_size=40))
def test_class_free_pickles_give_a_trace_or_the_readers_own_error(opcodes):
    try:
        read(b"\x80\x04" + b"".join(opcodes) + b".")
    except ValueError:
        pass


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
ENTRY_KEYS = ["collective_seq_id", "profiling_name", "time_created_ns", "time_discovered_completed_ns"]
ENTRY_KEYS += ["process_group", "pg_id", "retired", "state", "is_p2p"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(ENTRY_KEYS), JSON_VALUES | st.integers(10**300, 10**310))))
def test_entries_of_any_shape_give_a_trace_or_the_readers_own_error(entries):
    try:
        read(pickle.dumps({"entries": entries}))
    except ValueError:
        pass


def test_the_pickle_reader_instantiates_no_class(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for data in (pickle.dumps({"entries": [Payload()]}), pickle.dumps(SimpleNamespace(entries=[]))):
        with pytest.raises(ValueError, match="holds no classes"):
            load_dump(data)
    # An extension code (copyreg's registry) is resolved through find_class too.
    with pytest.raises(ValueError):
        load_dump(b"\x80\x04\x82\x01)R.")
    assert not marker.exists()


def test_the_monitor_skips_a_bad_dump_with_a_warning_and_judges_the_others(monkeypatch, caplog):
    from monitoring import diagnose

    good = pickle.dumps({"entries": [{**ONE, "pg_id": 0, "retired": True}]})

    class Backend:
        def flight_recorder_dumps(self, handle):
            return {0: CRAFTED["append to an int"], 1: CRAFTED["deep JSON"], 2: good}

    monkeypatch.setattr(diagnose.actions, "get_backend_for", lambda job: Backend())
    monkeypatch.setattr(diagnose, "c4d_records", lambda job, attempt: {})
    with caplog.at_level(logging.WARNING, logger=diagnose.log.name):
        found = diagnose.c4d_input(SimpleNamespace(pk=7), SimpleNamespace(backend_handle={}))
    assert sorted(found.traces) == [2]
    assert [r.seq for r in found.traces[2].records] == [1]
    skipped = [r.getMessage() for r in caplog.records if "Flight Recorder dump skipped" in r.getMessage()]
    assert len(skipped) == 2 and any("rank 0" in m for m in skipped) and any("rank 1" in m for m in skipped)


# --- the beat's schedule file ---


def schedule_modes(base: str) -> dict[str, int]:
    return {os.path.basename(p): stat.S_IMODE(os.stat(p).st_mode) for p in glob.glob(base + "*")}


def test_the_beat_schedule_files_are_the_consoles_alone(tmp_path):
    """The configured scheduler (Procfile's embedded beat and deploy's vigil-beat both take
    the app's beat_scheduler) writes its shelve files 0600 under the usual 022 umask, and
    makes those of an existing install 0600 too."""
    from celery.utils.imports import symbol_by_name

    from console.celery import app

    scheduler_class = symbol_by_name(app.conf.beat_scheduler)
    old = os.umask(0o022)
    try:
        fresh = str(tmp_path / "fresh" / "celerybeat-schedule")
        os.makedirs(os.path.dirname(fresh))
        scheduler = scheduler_class(app=app, schedule_filename=fresh, lazy=False)
        scheduler.sync()
        scheduler.close()
        assert schedule_modes(fresh) and set(schedule_modes(fresh).values()) == {0o600}, schedule_modes(fresh)

        # An install from before: the files are there, 0644.
        import shelve

        existing = str(tmp_path / "old" / "celerybeat-schedule")
        os.makedirs(os.path.dirname(existing))
        shelve.open(existing).close()
        assert set(schedule_modes(existing).values()) == {0o644}
        scheduler = scheduler_class(app=app, schedule_filename=existing, lazy=False)
        scheduler.close()
        assert set(schedule_modes(existing).values()) == {0o600}, schedule_modes(existing)
    finally:
        os.umask(old)
