"""An instance's Flight Recorder files, for C4D without code changes: the start-up hook
installed where the ranks can read it, the environment that turns PyTorch's recorder and
that hook (fr_boot.py) on, the dumps read back, and a fresh dump asked for.

One definition for every backend that runs ranks on a filesystem the console reads: the
local backend, and the Slurm backend, whose step wrapper runs on the nodes from the
attempt's shared directory (slurm_step.py; this file is copied there with it). So:
standard library only, Python 3.8+.

A fresh dump is asked for through a file, not a signal. The console writes a new token
into <fr_dir>/request, in place (the file exists from launch, so a node's NFS client never
holds a cached "no such file" for it, and close-to-open makes its next open see the new
bytes); the hook's thread, which looks at it every flush period, takes torch's dump at
once, writes it, then writes answer_<rank> holding the token. A signal would need a Python
handler, which runs only on the main thread between bytecodes: a rank hung inside a
collective or a C++ call never runs it, and SIGUSR1/SIGUSR2 belong to the job's own tools
(Lightning requeues on SIGUSR1). The hook's thread runs while the main thread waits in a
collective (it lets go of the GIL), and the file needs no Slurm call per request.
"""

from __future__ import annotations

import os
import re
import stat
import time
import uuid
from typing import Dict, Iterable, List, Mapping, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
FR_DIR = "c4d"  # under the instance's directory
FR_BOOT_PATH = os.path.join(HERE, "fr_boot.py")
# The SDK modules the hook injects where the job has no vigil of its own (fr_boot._vigil_c4d):
# this checkout's, so the job reports in the console's own protocol.
SDK_PACKAGE = os.path.join(HERE, os.pardir, os.pardir, "sdk", "src", "vigil")
SDK_C4D_MODULES = ("__init__.py", "_client.py", "c4d.py", "job_monitor.py")
NCCL_DUMP_PREFIX = "nccl_trace_rank_"
FR_DUMP_NAME = re.compile(r"^(?:fr_([0-9]{1,7})\.json|nccl_trace_rank_([0-9]{1,7}))$")
# How many collectives a rank keeps: the hang needs the last few, and a dump is written
# whenever it changes, so it stays small.
FR_BUFFER_SIZE = 200
MAX_FR_DUMP = 32 * 1024 * 1024  # the most read of one dump
REQUEST = "request"  # the console's token asking for a fresh dump (fr_boot reads it)
ANSWER_NAME = re.compile(r"^answer_([0-9]{1,7})$")  # the token a rank answered with its dump
MAX_TOKEN = 64


def install_readable(src: str, dst: str) -> None:
    """A copy of the backend's file src at dst (new, 0644): the job reads it, cannot change it."""
    with open(src, "rb") as f:
        code = f.read()
    with os.fdopen(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
        f.write(code)


def _mkdir_readable(path: str) -> None:
    os.mkdir(path, 0o755)
    os.chmod(path, 0o755)  # whatever the umask


def install_boot(boot: str) -> Optional[str]:
    """The hook as boot/sitecustomize.py, and the SDK's C4D modules under boot/sdk/vigil
    (0755/0644) for the hook to inject where the recorder has no completion times. Returns
    the SDK directory, or None (the recorder alone) when this checkout has no SDK."""
    _mkdir_readable(boot)
    install_readable(FR_BOOT_PATH, os.path.join(boot, "sitecustomize.py"))
    if not all(os.path.isfile(os.path.join(SDK_PACKAGE, m)) for m in SDK_C4D_MODULES):
        return None
    sdk = os.path.join(boot, "sdk")
    for d in (sdk, os.path.join(sdk, "vigil")):
        _mkdir_readable(d)
    for module in SDK_C4D_MODULES:
        install_readable(os.path.join(SDK_PACKAGE, module), os.path.join(sdk, "vigil", module))
    return sdk


def recorder_env(fr_dir: str, boot: str, env: Mapping[str, str], sdk: Optional[str] = None) -> Dict[str, str]:
    """What C4D adds to a rank's environment: PyTorch's Flight Recorder on, NCCL's own dump
    on timeout into fr_dir, and the hook (boot, first on PYTHONPATH) dumping gloo's trace
    there too. The job's own TORCH_* values win: it may want a bigger buffer."""
    prefix = os.path.join(fr_dir, NCCL_DUMP_PREFIX)
    out = {"VIGIL_FR_DIR": fr_dir, "PYTHONPATH": os.pathsep.join(filter(None, [boot, env.get("PYTHONPATH", "")]))}
    if sdk:
        out["VIGIL_C4D_SDK"] = sdk
    for name, value in (
        ("TORCH_FR_BUFFER_SIZE", str(FR_BUFFER_SIZE)),
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", str(FR_BUFFER_SIZE)),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        ("TORCH_FR_DUMP_TEMP_FILE", prefix),
        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix),
    ):
        if not env.get(name):
            out[name] = value
    return out


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read_regular(path: str, limit: int) -> Optional[bytes]:
    """At most `limit` bytes of a regular file, never through a link (the job writes these)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(limit)


def read_dumps(fr_dirs: Iterable[str]) -> Dict[int, bytes]:
    """rank -> the newest dump of that rank under the given directories: the hook's
    fr_<rank>.json or NCCL's own dump on timeout; only regular files, never through a
    link, and at most MAX_FR_DUMP bytes of each."""
    newest: Dict[int, tuple] = {}
    for fr_dir in fr_dirs:
        for entry in _listdir(fr_dir):
            m = FR_DUMP_NAME.match(entry)
            if not m:
                continue
            rank = int(m.group(1) or m.group(2))
            path = os.path.join(fr_dir, entry)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mtime >= newest.get(rank, (-1.0, ""))[0]:
                newest[rank] = (st.st_mtime, path)
    out = {}
    for rank, (_, path) in newest.items():
        data = _read_regular(path, MAX_FR_DUMP)
        if data is not None:
            out[rank] = data
    return out


def create_request(fr_dir: str) -> None:
    """The empty request file, at launch (see the module docstring: it must exist before
    the ranks look for it)."""
    fd = os.open(os.path.join(fr_dir, REQUEST), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)


def _write_request(fr_dir: str, token: str) -> bool:
    """The token into fr_dir/request, in place. The directory is the job's: the file is
    written only if it is a regular file, not a link, owned by the directory's owner (a
    link or a hard link the job planted would have the console overwrite another file)."""
    try:
        dfd = os.open(fr_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        owner = os.fstat(dfd).st_uid
        fd = os.open(REQUEST, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError:
        os.close(dfd)
        return False
    os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != owner or st.st_nlink != 1:
            return False
        os.ftruncate(fd, 0)
        os.write(fd, (token + "\n").encode())
        return True
    finally:
        os.close(fd)


def answers(fr_dir: str, token: str) -> List[int]:
    """The ranks under fr_dir whose hook answered `token` with a fresh dump."""
    out = []
    for entry in _listdir(fr_dir):
        m = ANSWER_NAME.match(entry)
        if m and (_read_regular(os.path.join(fr_dir, entry), MAX_TOKEN + 2) or b"").strip() == token.encode():
            out.append(int(m.group(1)))
    return sorted(out)


def ask_for_dumps(
    fr_dirs: Mapping[str, str], timeout: float, poll: float = 0.1, token: Optional[str] = None
) -> Dict[str, List[int]]:
    """Ask every instance (name -> its fr_dir) for a fresh dump and wait, at most `timeout`
    seconds, until each has answered from at least one rank. Returns name -> the ranks that
    answered ([] where none did in time: its process has no process group yet, is gone, or
    its hook cannot run). The dumps are then read with read_dumps."""
    token = token or uuid.uuid4().hex
    asked = [name for name, d in fr_dirs.items() if _write_request(d, token)]
    deadline = time.monotonic() + timeout
    found: Dict[str, List[int]] = {name: [] for name in fr_dirs}
    while True:
        for name in asked:
            if not found[name]:
                found[name] = answers(fr_dirs[name], token)
        if all(found[name] for name in asked) or time.monotonic() >= deadline:
            return found
        time.sleep(poll)
