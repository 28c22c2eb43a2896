"""A fresh Flight Recorder dump on request (issue 27): before it judges a hang the console
touches each instance's c4d/dump.request and the start-up hook (fr_boot.py) dumps at once,
not at its next period; LocalBackend.refresh_flight_recorder_dumps waits for that."""

import importlib.util
import json
import os
import threading
import time
import types

from jobs.backends import local
from jobs.backends.local import FR_BOOT_PATH, FR_DIR, LocalBackend


def hook():
    spec = importlib.util.spec_from_file_location("vigil_fr_boot_under_test", FR_BOOT_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no VIGIL_FR_DIR, no VIGIL_C4D: it starts nothing
    return module


def test_the_hook_dumps_at_once_when_asked_and_the_backend_sees_the_fresh_dump(tmp_path, monkeypatch):
    monkeypatch.delenv("VIGIL_FR_DIR", raising=False)
    monkeypatch.delenv("VIGIL_C4D", raising=False)
    boot = hook()
    fr_dir = tmp_path / "master-0" / FR_DIR
    fr_dir.mkdir(parents=True)
    dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: 0)
    monkeypatch.setitem(__import__("sys").modules, "torch.distributed", dist)
    monkeypatch.setattr(boot, "_dump", lambda: b'{"entries": [], "n": 0}')
    stop = threading.Event()
    # A 60 s period: only the request can make it dump within the test.
    loop = threading.Thread(target=boot._dump_loop, args=(str(fr_dir), 60.0, stop), daemon=True)
    loop.start()
    try:
        handle = {"dir": str(tmp_path), "instances": [{"name": "master-0"}]}
        backend = LocalBackend.__new__(LocalBackend)
        assert backend.refresh_flight_recorder_dumps(handle) is True  # no dump yet: nothing to wait for
        (fr_dir / "fr_0.json").write_bytes(b'{"entries": []}')
        old = os.stat(fr_dir / "fr_0.json").st_mtime
        os.utime(fr_dir / "fr_0.json", (old - 30, old - 30))
        assert backend.refresh_flight_recorder_dumps(handle, timeout=5.0) is True
        assert os.stat(fr_dir / "fr_0.json").st_mtime > old - 1
        assert json.loads((fr_dir / "fr_0.json").read_bytes()) == {"entries": [], "n": 0}
        # Unchanged data is written again when asked: the console sees it is fresh.
        first = os.stat(fr_dir / "fr_0.json").st_mtime_ns
        time.sleep(0.02)  # past the file system's clock tick, so the request is newer
        assert backend.refresh_flight_recorder_dumps(handle, timeout=5.0) is True
        assert os.stat(fr_dir / "fr_0.json").st_mtime_ns > first
    finally:
        stop.set()
        loop.join(5)
    assert not loop.is_alive()
    assert local.FR_REQUEST == boot.REQUEST
