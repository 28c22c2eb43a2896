"""Keep the data directory and the secrets in it readable by the console alone.

The data dir holds secret_key, the SQLite database and first-start.txt (the first
admin's password and token). Jobs may run on this machine under other OS users:
they must never read any of it, on new installs and on those made before.
"""

from __future__ import annotations

import os
from pathlib import Path

SECRET_FILES = ("secret_key", "first-start.txt", "vigil.sqlite3", "vigil.sqlite3-wal", "vigil.sqlite3-shm")


def secure(data_dir: Path, *, traversable: bool = False) -> None:
    """Mode 0700 on the data dir (0711 when jobs of other users must pass through it to
    their own attempt's directory: they still cannot list it) and 0600 on its secrets."""
    _chmod_own(data_dir, 0o711 if traversable else 0o700)
    for name in SECRET_FILES:
        _chmod_own(data_dir / name, 0o600)


def secure_sqlite(path: str) -> None:
    """The database and its WAL files: owner-only (SQLite creates them with the umask's mode)."""
    for suffix in ("", "-wal", "-shm"):
        _chmod_own(Path(f"{path}{suffix}"), 0o600)


def _chmod_own(path: Path, mode: int) -> None:
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return
    if st.st_uid == os.geteuid() and st.st_mode & 0o777 != mode:
        os.chmod(path, mode)


def secure_beat_schedule(filename: str, suffixes: tuple[str, ...]) -> None:
    """Celery beat's shelve files (filename + each of dbm's suffixes): owner-only."""
    for suffix in suffixes:
        _chmod_own(Path(f"{filename}{suffix}"), 0o600)
