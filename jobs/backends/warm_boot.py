"""A parked interpreter (issue 19): import the heavy modules now, run a rank later.

Started by a parked shim (shim.py --park) as the job's OS user, in the job's
environment and working directory, with its control socket as argv[1]; standard
library only, and nothing of the console. It

1. asks to die with its shim (PR_SET_PDEATHSIG) while parked, so a standby never
   outlives the shim that owns it, then reads the park message
   ({"path0", "modules"}; the shim lowered its priority), puts the entry point's
   directory first on sys.path (so the user's own modules import as they will in
   the rank) and imports the modules (then sets torch.distributed.nn's collectives to take the
   rank's first default group as their default, as a cold import after
   init_process_group would have); says "parked" (or why it could not) on the
   socket, if the shim still listens;
2. waits for the launch message: the attempt's environment, working directory,
   entry point and argv, with the attempt's log as a passed file descriptor. A
   restart soon after the attempt started may hand it over before the imports are
   done: the shim has sent it and closed its end by then, and the rank starts once
   they are (if one failed, the rank's log says so and it ends with 127);
3. becomes the rank: log on stdout and stderr, environment replaced (with PWD, which
   the shell sets), cwd, sys.path[0], sys.argv; then forks. The child runs the entry
   point as `python` would run it; the parent stands where /bin/sh stands in a cold
   start (the shim's child and the process group's leader, the rank below it) and
   ends as dash does: the rank's exit code, 128+N when a signal N ended the rank,
   killed itself by a signal sent to the group. So the exit the shim records, what
   a stop does and the rank's view (its parent, its group) are the cold start's.
   Forking after the imports is safe here: a parked interpreter has no GPU context
   and no process group open, and the child shares the imported modules for free.

What a cold start does and this reproduces: a script runs in a fresh ``__main__``
module whose ``__file__`` is the absolute path and whose ``sys.argv[0]`` is the path
as written (runpy.run_path cannot give both, so the script is compiled and run
here the way the interpreter does); a module runs through runpy's
``_run_module_as_main``, the very function ``python -m`` calls. An uncaught
exception prints its traceback without this file's frames and exits 1; an
uncaught KeyboardInterrupt ends the process by SIGINT; SystemExit is left to the
interpreter. Signal handlers are Python's defaults, never touched here.
"""

import json
import os
import socket
import struct
import sys

HEADER = struct.Struct("<Q")
_BOOT_FILE = os.path.abspath(__file__)


def recv_message(sock):
    """One length-prefixed JSON message and the file descriptors sent with it (EOFError
    if the peer closed the socket first). shim.py reads its launcher's message with it
    too; a message that does not arrive whole leaves no received descriptor open."""
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 4)
    try:
        while len(head) < HEADER.size:
            more = sock.recv(HEADER.size - len(head))
            if not more:
                raise EOFError("the peer closed the control socket")
            head += more
        (size,) = HEADER.unpack(head)
        body = b""
        while len(body) < size:
            chunk = sock.recv(min(size - len(body), 1 << 20))
            if not chunk:
                raise EOFError("the peer closed the control socket")
            body += chunk
        return json.loads(body), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _die_with_parent():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


def _live_with_parent():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # a rank outlives a lost shim, like a cold one
    except (OSError, AttributeError):
        pass


def _say(sock, text):
    """Tell the shim how parking went. A restart that came before the imports were done
    has already been handed over: the shim sent the launch, closed its end and no longer
    listens, so there is nobody to tell (and the launch is waiting in the socket)."""
    try:
        sock.sendall(text.encode())
    except OSError:  # BrokenPipeError, ConnectionResetError: the shim's end is closed
        pass


def _park(sock):
    """Import the heavy modules; "" when parked, else why not (also said on the socket)."""
    park, _ = recv_message(sock)
    sys.path[0] = park["path0"]
    for name in park.get("modules") or ():
        try:
            __import__(name)
        except BaseException as exc:  # noqa: BLE001 - any failure means no standby
            failed = f"failed import {name}: {type(exc).__name__}: {exc}"
            _say(sock, failed + "\n")
            return failed
    _capture_the_world_as_a_cold_import_does()
    _say(sock, "parked\n")
    return ""


def _capture_the_world_as_a_cold_import_does():
    """torch.distributed.nn.functional's collectives take ``group=group.WORLD`` as a
    default argument, evaluated when the module is imported. A cold rank imports it
    (through torch._dynamo, which DistributedDataParallel imports) after its
    init_process_group, so those defaults hold the default process group until the
    interpreter ends and the group outlives a main() that let DDP go after
    destroy_process_group. Imported here, before any group exists, the defaults are
    None and the DDP Reducer holds the group's last reference: the group is then
    destroyed when main() returns, in the Reducer's destructor with the GIL held,
    while it joins gloo's worker, which waits for the GIL (pytorch/pytorch#56297).
    So, as the cold import would, the first default group the rank sets is put in
    those defaults (once: later groups do not change what an import captured)."""
    functional = sys.modules.get("torch.distributed.nn.functional")
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    world_type = type(getattr(c10d, "_world", None))
    prop = getattr(world_type, "default_pg", None)
    if functional is None or not isinstance(prop, property) or prop.fset is None:
        return
    if c10d._world.default_pg is not None:  # a group already: the import captured it
        return
    uncaptured = []
    for fn in vars(functional).values():
        code = getattr(fn, "__code__", None)
        if getattr(fn, "__module__", None) != functional.__name__ or code is None or not fn.__defaults__:
            continue
        names = code.co_varnames[code.co_argcount - len(fn.__defaults__) : code.co_argcount]
        if "group" in names and fn.__defaults__[names.index("group")] is None:
            uncaptured.append((fn, names.index("group")))
    if not uncaptured:
        return

    def set_default_pg(world, pg, fset=prop.fset):
        fset(world, pg)
        if pg is not None and uncaptured:
            for fn, at in uncaptured:
                defaults = list(fn.__defaults__)
                defaults[at] = pg
                fn.__defaults__ = tuple(defaults)
            uncaptured.clear()

    setattr(world_type, "default_pg", property(prop.fget, set_default_pg, prop.fdel, prop.__doc__))


class _NotParked(Exception):
    """The imports failed, and the launch came before the shim could see it."""


def _trimmed(tb):
    """The traceback without this file's frames (the cold rank has none of them)."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _BOOT_FILE:
        tb = tb.tb_next
    return tb


def _become_rank(launch, fds):
    log_fd = fds[0]
    for f in (sys.stdout, sys.stderr):
        f.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    for extra in fds[1:]:
        os.close(extra)
    os.chdir(launch["cwd"])
    os.environ.clear()
    os.environ.update(launch["env"])
    os.environ["PWD"] = os.getcwd()  # /bin/sh exports it to every command
    import tempfile

    tempfile.tempdir = None  # TMPDIR is the attempt's now
    sys.path[0] = launch["path0"]
    sys.argv[:] = launch["argv"]


def _fresh_main():
    """An empty ``__main__`` like the one the interpreter makes, in place of this file's
    (whose names must not leak into the user's module)."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": builtins, "__annotations__": {}})
    sys.modules["__main__"] = main
    return main


def _run_script(path):
    import importlib.machinery
    import io

    main = _fresh_main()
    filename = os.path.abspath(path)
    main.__dict__.update(
        {
            "__file__": filename,
            "__cached__": None,
            "__loader__": importlib.machinery.SourceFileLoader("__main__", filename),
        }
    )
    with io.open_code(filename) as f:
        source = f.read()
    code = compile(source, filename, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _run_module(name):
    import runpy

    _fresh_main()  # runpy runs the module in the current __main__'s namespace, as python -m does
    runner = getattr(runpy, "_run_module_as_main", None)
    if runner is not None:
        runner(name, True)
    else:  # pragma: no cover - every CPython 3 has it; keep working if it goes
        runpy.run_module(name, run_name="__main__", alter_sys=True)


def _stand_in_for_the_shell(rank):
    """What dash does after starting a command: wait, then exit with its status."""
    import signal

    for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)  # a signal to the group ends this process as it ends sh
    while True:
        try:
            _, status = os.waitpid(rank, 0)
            break
        except ChildProcessError:
            os._exit(127)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


def main():
    _die_with_parent()
    if len(sys.argv) > 2 and os.getppid() != int(sys.argv[2]):
        os._exit(0)  # the shim died before PDEATHSIG was set: nobody would ever end this standby
    sock = socket.socket(fileno=int(sys.argv[1]))
    failed = _park(sock)
    try:
        # Waits for the launch even when the imports failed: a shim that saw "failed"
        # discards this standby (kills it), but one whose launch crossed the message
        # gets the reason in the rank's log instead of a rank that ends without a word.
        launch, fds = recv_message(sock)
        _live_with_parent()
        sock.close()
        _become_rank(launch, fds)
        if failed:
            raise _NotParked(failed)
        for f in (sys.stdout, sys.stderr):
            f.flush()
        rank = os.fork()
    except BaseException as exc:  # noqa: BLE001 - the rank never ran: say so where its log is
        # Exit 127, as /bin/sh does for a command it cannot start, with the reason on
        # stderr (the attempt's log once _become_rank has put it there).
        why = str(exc) if isinstance(exc, _NotParked) else f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"vigil: the parked interpreter could not start the rank: {why}\n")
        sys.stderr.flush()
        os._exit(127)
    if rank:
        _stand_in_for_the_shell(rank)
    try:
        if launch["kind"] == "module":
            _run_module(launch["target"])
        else:
            _run_script(launch["target"])
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report it as the interpreter would
        # The hook prints the exception's own traceback when it has one: trim that.
        exc.__traceback__ = _trimmed(exc.__traceback__)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        if isinstance(exc, KeyboardInterrupt):
            import atexit
            import signal

            atexit._run_exitfuncs()
            for f in (sys.stdout, sys.stderr):
                f.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
