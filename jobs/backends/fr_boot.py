"""Vigil's start-up hook for C4D without code changes. The local backend copies this
file as `sitecustomize.py` into a directory it puts first on the job's PYTHONPATH when
C4D is on, so every Python process of the job runs it at interpreter start; it is
never imported by the console.

PyTorch's Flight Recorder does the recording (the backend sets TORCH_FR_BUFFER_SIZE):
nothing of the user's code is wrapped. What torch lacks for gloo is a dump: gloo has
no watchdog and never writes its trace by itself (core/flight_recorder.py). So one
daemon thread, named vigil-fr so stack snapshots never make it a suspect, waits
until the process has a default process group and then, every VIGIL_C4D_FLUSH_SECONDS,
takes torch's own JSON dump (_dump below) and writes it to $VIGIL_FR_DIR/fr_<rank>.json when it
changed (write then rename: the console never reads half a file). A rank hung in a
collective or in compute keeps its last dump, which is what the console judges.
The main thread lets go of the GIL while it waits inside a collective, so the dump
is taken then too.

Standard library only, and every failure is swallowed: this must never stop a job.
Then it runs the sitecustomize it shadows, if the interpreter has one.
"""

import os
import sys
import threading
import time


def _period():
    try:
        value = float(os.environ.get("VIGIL_C4D_FLUSH_SECONDS", "1"))
        return value if value > 0 else 1.0
    except ValueError:
        return 1.0


def _write(directory, rank, data):
    path = os.path.join(directory, "fr_%d.json" % rank)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _dump():
    """torch's JSON dump of the recorder that holds this process's collectives. NCCL
    keeps its own recorder (_dump_nccl_trace_json, in CUDA builds only); gloo and the
    other backends record into the generic one (_dump_fr_trace_json). The first with
    entries wins; else the generic one, so the console still sees the process group."""
    import json

    from torch._C import _distributed_c10d as c10d

    fallback = None
    for name in ("_dump_nccl_trace_json", "_dump_fr_trace_json"):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        data = fn()
        if json.loads(data).get("entries"):
            return data
        fallback = fallback or data
    return fallback


def _dump_loop(directory, period):
    last = None
    while True:
        time.sleep(period)
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            continue
        try:
            if not dist.is_available() or not dist.is_initialized():
                continue
            rank = dist.get_rank()
            data = _dump()
            if data is not None and data != last:
                _write(directory, rank, data)
                last = data
        except Exception:
            continue


def _start():
    directory = os.environ.get("VIGIL_FR_DIR", "")
    if not directory or not os.path.isdir(directory):
        return
    threading.Thread(target=_dump_loop, args=(directory, _period()), name="vigil-fr", daemon=True).start()


def _chain():
    """Run the sitecustomize that this one shadows (Debian's Python has one)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _start()
except Exception:
    pass
try:
    _chain()
except Exception:
    pass
