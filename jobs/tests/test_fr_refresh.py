"""A fresh Flight Recorder dump on request (issue 27): before it judges a hang the console
writes a new token into each instance's c4d/request (fr_files.ask_for_dumps) and the
start-up hook (fr_boot.py) dumps at once, not at its next period, then answers with the
token; a request made before the hook's thread first looked is answered too."""

import importlib.util
import json
import os
import sys
import threading
import time
import types

from jobs.backends import fr_files
from jobs.backends.fr_files import FR_BOOT_PATH, FR_DIR


def hook():
    spec = importlib.util.spec_from_file_location("vigil_fr_boot_under_test", FR_BOOT_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no VIGIL_FR_DIR, no VIGIL_C4D: it starts nothing
    return module


def test_the_hook_dumps_at_once_when_asked_even_before_it_first_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("VIGIL_FR_DIR", raising=False)
    monkeypatch.delenv("VIGIL_C4D", raising=False)
    boot = hook()
    fr_dir = tmp_path / "master-0" / FR_DIR
    fr_dir.mkdir(parents=True)
    fr_files.create_request(str(fr_dir))  # as the backend does at launch
    dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: 0)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.setattr(boot, "_dump", lambda: b'{"entries": [], "n": 0}')
    dirs = {"master-0": str(fr_dir)}
    # Asked before the hook's thread first looks (a zero wait: the request is only written).
    assert fr_files.ask_for_dumps(dirs, 0.0, token="early") == {"master-0": []}
    stop = threading.Event()
    # A 60 s period: only the request can make it dump within the test.
    loop = threading.Thread(target=boot._dump_loop, args=(str(fr_dir), 60.0, stop), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 5.0
        while not fr_files.answers(str(fr_dir), "early"):
            assert time.monotonic() < deadline, "the request made before the hook looked was not answered"
            time.sleep(0.05)
        assert json.loads((fr_dir / "fr_0.json").read_bytes()) == {"entries": [], "n": 0}
        # Unchanged data is written again when asked, and answered: the console knows it is fresh.
        first = os.stat(fr_dir / "fr_0.json").st_ino
        assert fr_files.ask_for_dumps(dirs, 5.0) == {"master-0": [0]}
        assert os.stat(fr_dir / "fr_0.json").st_ino != first  # a new file (write, then rename)
    finally:
        stop.set()
        loop.join(5)
    assert not loop.is_alive()
