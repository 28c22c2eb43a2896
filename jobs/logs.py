"""The one reader of instance logs, for the API, the pages, the live consumer and
the classifier's tail.

A backend with a local path (local, Slurm on a shared filesystem) is read from
that file directly, so a download or a live tail never goes through the backend;
otherwise every read is the backend's `read_log`/`tail_log`. Line numbers and
targets are the pure `core.logindex` over this reader, with one process-wide
`LineMarks` so a log counted once is not counted from byte 0 again.
"""

from __future__ import annotations

import os

from core import logindex, logtimes

from .backends.base import Backend, BackendError, read_log_file, tail_log_file

# Keyed by the log's local path: only a file has a name that outlives the reader.
LINE_MARKS = logindex.LineMarks()


class InstanceLog:
    """One instance's combined stdout/stderr log of one attempt."""

    def __init__(self, backend: Backend, handle: dict, name: str) -> None:
        self.backend = backend
        self.handle = handle
        self.name = name
        self.fd: int | None = None
        self.path: str | None
        try:
            self.path = backend.log_path(handle, name)
        except BackendError:  # a backend that cannot name a path reads through read_log
            self.path = None

    # -- bytes ----------------------------------------------------------------------
    def size(self) -> int | None:
        """The log's size in bytes when it is a local file that exists, else None."""
        if not self.path:
            return None
        try:
            return os.path.getsize(self.path)
        except OSError:
            return None

    def last_write(self) -> float | None:
        """When the log was last written (its mtime, epoch seconds) when it is a
        local file that exists, else None: the instance's last output."""
        if not self.path:
            return None
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return None

    def read(self, offset: int, limit: int | None) -> bytes:
        """Bytes from `offset`; b"" past the end or before the file exists. A
        backend's refusal is its BackendError."""
        if self.path:
            try:
                return read_log_file(self.path, offset, limit)
            except (OSError, OverflowError, ValueError):
                return b""  # an offset past anything a file can hold (a client's): nothing there
        return self.backend.read_log(self.handle, self.name, offset, limit)

    def read_or_empty(self, offset: int, limit: int) -> bytes:
        """read() for streams that simply end where the backend cannot read on
        (downloads, archives, line counts behind a redirect)."""
        try:
            return self.read(offset, limit)
        except BackendError:
            return b""

    def tail(self, nbytes: int) -> bytes:
        """The last `nbytes` bytes (fewer when the log is shorter)."""
        if self.path:
            return tail_log_file(self.path, nbytes)
        return self.backend.tail_log(self.handle, self.name, nbytes)

    def pread(self, offset: int, limit: int) -> bytes:
        """read() of a local file through a descriptor kept open between calls (a
        live tail reads many times a second: no open, no thread hop). Only with a path."""
        if self.fd is None:
            try:
                self.fd = os.open(self.path or "", os.O_RDONLY)
            except OSError:
                return b""
        try:
            return os.pread(self.fd, limit, offset)
        except (OSError, OverflowError, ValueError):
            return b""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    # -- capture times ----------------------------------------------------------------
    def _times(self) -> tuple[logtimes.Reader, int] | None:
        """(reader, size) of the sidecar of capture times beside a local log, or None."""
        if not self.path:
            return None
        sidecar = self.path + logtimes.SUFFIX
        try:
            size = os.path.getsize(sidecar)
        except OSError:
            return None
        return (lambda offset, limit: read_log_file(sidecar, offset, limit)), size

    def line_times(self, offset: int, chunk: bytes) -> list[float | None] | None:
        """The capture time of each line of `chunk` (log bytes from `offset`), None
        for a line not covered yet; None when the log has no capture times at all
        (a backend without a local shim, a log from before they were recorded)."""
        times = self._times()
        if times is None:
            return None
        return logtimes.line_times(times[0], times[1], offset, chunk)

    # -- lines ------------------------------------------------------------------------
    def line_at(self, offset: int, lenient: bool = False) -> int:
        """The 1-based number of the line holding byte `offset`; `lenient` counts
        only as far as the backend can read instead of raising its BackendError."""
        read = self.read_or_empty if lenient else self.read
        return logindex.line_at_offset(read, offset, LINE_MARKS, self.path)

    def resolve(self, target: dict) -> tuple[int | None, int, int, str]:
        """core.logindex.resolve_target over this log."""
        return logindex.resolve_target(self.read, target, LINE_MARKS, self.path)


def readable_tails(backend: Backend, handle: dict, names, nbytes: int):
    """(name, last `nbytes` of its log) for each instance in `names` whose log can be read
    now, in that order; the panels read the first few ranks' tails and stop at the first
    that tells them what they look for, so this is lazy."""
    for name in names:
        log = InstanceLog(backend, handle, name)
        try:
            tail = log.tail(nbytes)
        except BackendError:
            continue
        finally:
            log.close()
        yield name, tail
