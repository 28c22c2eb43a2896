"""Vigil's start-up hook for C4D without code changes. The backend copies this file as
`sitecustomize.py` into a directory put first on the job's PYTHONPATH when C4D is on
(the local backend: the instance's boot/; Slurm: the attempt's shared runtime/boot/,
which every node reads), so every Python process of the job runs it at interpreter
start; it is never imported by the console.

PyTorch's Flight Recorder does the recording (the backend sets TORCH_FR_BUFFER_SIZE):
nothing of the user's code is wrapped. What torch lacks for gloo is a dump: gloo has
no watchdog and never writes its trace by itself (core/flight_recorder.py). So one
daemon thread, named vigil-fr so stack snapshots never make it a suspect, waits
until the process has a default process group and then, every VIGIL_C4D_FLUSH_SECONDS,
takes torch's own JSON dump (_dump below) and writes it to $VIGIL_FR_DIR/fr_<rank>.json when it
changed (write then rename: the console never reads half a file). A rank hung in a
collective or in compute keeps its last dump, which is what the console judges.
The main thread lets go of the GIL while it waits inside a collective, so the dump
is taken then too. The console asks for a fresh dump by writing a new token into
$VIGIL_FR_DIR/request (jobs/backends/fr_files.py says why a file and not a signal): the
thread then dumps at once, changed or not, and writes the token to answer_<rank> after
the dump, so the console knows the dump it reads was taken after it asked. No request
file, no request: a backend that never creates one sees the hook as before.

Where the recorder falls short -- gloo (torch 2.13, CPU) records whether a collective
finished, never when, so slowness cannot be judged from it -- the hook also injects the
SDK's own C4D instrumentation, the same `vigil.c4d.instrument_torch_distributed()` a job
that imports the SDK calls: once `torch.distributed` has been imported (an import hook
runs it right after that module's body, before the user's code can bind a collective
with `from torch.distributed import all_reduce`), its collectives are wrapped and each
call's enter and exit are posted to the console with the job's own token, which the job
already has. One vigil per process: the job's own SDK where it has one (so a job that
also imports vigil.c4d shares the one recorder and its one seq counter: nothing is
counted twice); else the backend's copy under $VIGIL_C4D_SDK, loaded for the hook only
and taken out of sys.modules again, so the job's own `import vigil` sees what it always
did. The console decides which source answers which question (core/flight_recorder.py,
`judge_sources`).

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


def _write(directory, name, data):
    path = os.path.join(directory, name)
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


def _requested(path):
    """The console's latest token in the request file, or "" (none, or being written)."""
    try:
        with open(path, "rb") as f:
            line = f.read(66)
    except OSError:
        return ""
    return line.strip().decode("ascii", "replace") if line.endswith(b"\n") else ""


def _dump_loop(directory, period, stop=None):
    # `answered` starts empty: a request made before this thread first looked is still
    # answered. The request file is read every 0.2 s, so a hang's diagnosis waits that long
    # for its fresh dump at most, while the periodic dump stays at `period`.
    last, answered, due = None, "", time.monotonic() + period
    request = os.path.join(directory, "request")
    while stop is None or not stop.is_set():
        time.sleep(min(period, 0.2))
        token = _requested(request)
        fresh = bool(token) and token != answered
        if not fresh and time.monotonic() < due:
            continue
        due = time.monotonic() + period
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            continue
        try:
            if not dist.is_available() or not dist.is_initialized():
                continue
            rank = dist.get_rank()
            data = _dump()
            # Asked for: written even when unchanged, then answered, so the console knows the
            # dump it reads was taken after it asked.
            if data is not None and (data != last or fresh):
                _write(directory, "fr_%d.json" % rank, data)
                last = data
            if fresh and data is not None:
                _write(directory, "answer_%d" % rank, token.encode())
                answered = token
        except Exception:
            continue


def _start():
    directory = os.environ.get("VIGIL_FR_DIR", "")
    if not directory or not os.path.isdir(directory):
        return
    threading.Thread(target=_dump_loop, args=(directory, _period()), name="vigil-fr", daemon=True).start()


def _vigil_c4d():
    """vigil.c4d: the job's own where it has one, else the backend's copy, privately."""

    def ours():
        return [name for name in sys.modules if name == "vigil" or name.startswith("vigil.")]

    before = set(ours())
    try:
        import vigil.c4d as c4d

        if callable(getattr(c4d, "instrument_torch_distributed", None)):
            return c4d
    except Exception:
        pass
    for name in set(ours()) - before:  # another package named vigil: as if never tried
        del sys.modules[name]
    sdk = os.environ.get("VIGIL_C4D_SDK", "")
    if not sdk or not os.path.isdir(sdk):
        return None
    saved = {name: sys.modules.pop(name) for name in ours()}
    sys.path.insert(0, sdk)
    try:
        import vigil.c4d as c4d
    finally:
        sys.path.remove(sdk)
        for name in ours():
            del sys.modules[name]
        sys.modules.update(saved)
    return c4d


def _instrument(_module):
    try:
        c4d = _vigil_c4d()
        if c4d is not None:
            c4d.instrument_torch_distributed(True)
    except Exception:
        pass


class _AfterImport:
    """A one-shot meta path finder: lets the other finders find `name`, then runs `then`
    on the module right after its body ran (the job imports it; nothing is imported here)."""

    def __init__(self, name, then):
        self.name, self.then, self.busy = name, then, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        run, then = spec.loader.exec_module, self.then

        def exec_module(module):
            run(module)
            then(module)

        spec.loader.exec_module = exec_module  # this module's own loader instance
        return spec


def _inject_sdk():
    if os.environ.get("VIGIL_C4D", "").strip() != "1":
        return
    module = sys.modules.get("torch.distributed")
    if module is not None:  # imported already (by another sitecustomize or .pth)
        _instrument(module)
    else:
        sys.meta_path.insert(0, _AfterImport("torch.distributed", _instrument))


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
    _inject_sdk()
except Exception:
    pass
try:
    _chain()
except Exception:
    pass
