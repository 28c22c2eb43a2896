"""The shim that owns one local instance: run it, record how it ended, announce it.

Run by path with the console's python (`python -I -S shim.py <instance dir> <ready fd>`),
standard library only, so it starts in a few tens of milliseconds and does not
depend on Django, Redis or the process that launched it:

1. fork once and let the launcher reap the first process at once, so the shim is
   never a zombie of a long-lived worker; it stays in the new session the
   launcher gave it (start_new_session), so it outlives the console, the worker
   and Redis;
2. become a child subreaper, so descendants that leave the instance's process
   group are still found (and cleaned up) through the shim;
3. run the user command with /bin/sh -c in its own process group, with the
   instance's log file (O_APPEND) as stdout and stderr: the child writes the
   log itself, so nothing is lost if the shim dies, and the log's mtime is the
   last output time; while it runs, a thread of the shim stamps the log's growth
   into the sidecar `<log>.times` every MARK_INTERVAL (each line's capture time,
   core/logtimes.py), which never slows the child's writes;
4. write state.json (shim and child PIDs with their /proc start times, so a
   later reader can tell a recycled PID from ours), then report "ok" on the
   ready pipe; a launcher that died meanwhile changes nothing: the shim runs on
   and records the exit as usual (the next launcher reads state.json);
5. when the child ends (the shim's main thread is blocked in waitpid, so the
   exit wakes it at once: no polling interval in the exit latency), write exit.json
   (exit code, signal, time) atomically FIRST, then PUBLISH the exit on Redis in
   plain RESP with a short deadline (noderedis.py, shared with the Slurm wrapper);
   a Redis that is down costs at most a refused connection. What that needs is
   made while the instance runs, so the exit itself is a write, a rename and one
   PUBLISH: exit.json's temporary file is created (ReservedFile), and the Redis
   connection is opened and authenticated (noderedis.Announcer; a Redis that
   restarted meanwhile is reconnected to at the exit). The job cannot reach that
   connection: it exists only in the shim, after the child was started;
6. end whatever the instance left behind (SIGTERM, then SIGKILL); when the shim
   has no child left and the instance's group is gone there is nothing to look
   for, and /proc is not scanned.

Parked (issue 19, warm restarts): `python -I -S shim.py --park <standby dir> <ready fd>`
starts one parked interpreter (warm_boot.py) for the next attempt of a job, as the
job's user, at low priority, and waits for a launcher to connect to ctl.sock in the
standby directory (root's, 0700: the job cannot reach it) and send an instance
directory with its ready pipe. Then it is that instance's shim exactly as above,
except that the rank is the parked interpreter, given the attempt's environment,
cwd, argv and log by message, instead of a fresh /bin/sh (spec.json's "warm" says
what to run; without it, or when the parked interpreter is gone, it starts cold).
state.json says which start was used ("start": "warm" or "cold", "start_reason").
A parked shim that is never used ends itself and its interpreter on SIGUSR1 or
SIGTERM (the backend discarding it), when the attempt it stands by for (park.json's
"watch_dir") has had no live shim for "linger" seconds, or when its interpreter
dies; the interpreter dies with it (PR_SET_PDEATHSIG) while parked.

spec.json (written by the backend) holds: command, env, cwd, job_id, attempt,
instance, run, log, leftover_grace, redis ({host, port, username, password,
channel} or null) and user ({name, uid, gid, groups} or null).

When `user` is given (the shim runs as root, the job must not), only the child
drops privileges: setgroups, setgid, then setuid, after the log file is opened
and before the working directory is entered (as the job's user, so a directory it
cannot reach is not entered for it by root), so the shim itself keeps writing its files,
announcing the exit and cleaning up as root. Every file the shim writes is
owner-only (0600): the job cannot read its own spec (the Redis credentials) nor
another job's.
"""

import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time

try:  # imported as jobs.backends.shim (local.py)
    from .noderedis import Announcer
    from .warm_boot import HEADER, recv_message
except ImportError:  # run by path with -I, which leaves the script's folder off sys.path
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from noderedis import Announcer  # type: ignore[no-redef]
    from warm_boot import HEADER, recv_message  # type: ignore[no-redef]

STATE = "state.json"
EXIT = "exit.json"
SPEC = "spec.json"
TIMES_SUFFIX = ".times"  # core.logtimes.SUFFIX (the shim runs with the standard library only)
MARK_INTERVAL = 0.05  # seconds between looks at the log's size: a line's capture time is at most this late
REDIS_DEADLINE = 0.5  # seconds; the exit is already on disk, this only speeds the monitor up
PARK_SPEC = "park.json"  # what a parked shim starts (written by the backend)
PARK_STATE = "park-state.json"  # its PIDs and what became of it (written by the parked shim)
CTL = "ctl.sock"
BOOT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_boot.py")
PARK_TICK = 0.2  # seconds between a parked shim's looks at its interpreter and the watched attempt


# -- helpers shared with local.py (it imports this module) -----------------


def proc_start_ticks(pid):
    """The start time of `pid` in clock ticks since boot, or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def write_json_atomic(path, data):
    """Write JSON to `path` so readers see the old file or the new one, never a part."""
    # Per thread, not only per process: the console stops a job from a request thread
    # while a sweep in another thread of the same process may stop it too, and with one
    # name the first rename took the second writer's file away (FileNotFoundError, a 500).
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class ReservedFile:
    """A file written atomically later whose temporary is created now: creating a file is
    the slow part of writing one (ext4, after the shim slept through the instance's run:
    ~1 ms on a 2-core VM against 0.03 ms for the rename, bench/exit_detection.py), so the
    exit only writes and renames. Until then an empty `<name>.tmp.<pid>.<thread>` lies
    beside it, which no reader opens; when it cannot be created, or is gone at the write,
    the write is write_json_atomic's."""

    def __init__(self, path):
        self.path = path
        self.tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
        try:
            self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            self.fd = None

    def write_json(self, data):
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                try:
                    body = memoryview(json.dumps(data).encode())
                    while body:
                        body = body[os.write(fd, body) :]
                finally:
                    os.close(fd)
                os.replace(self.tmp, self.path)
                return
            except OSError:
                pass
        write_json_atomic(self.path, data)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:
        return None


def descendants(root_pids):
    """PIDs of every live descendant of `root_pids` (scans /proc; cleanup path only)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(root_pids)
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


# -- the shim itself -----------------------------------------------------


def _set_child_subreaper():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass  # without it, orphans go to init; stop still finds the process group


def signal_all(pgid, pids, sig):
    """Signal a process group (if any) and each of the pids, ignoring the gone."""
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap_nohang():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_leftovers(pgid, grace):
    """After the instance ended: SIGTERM what it left running, SIGKILL after `grace`."""
    # The usual case, nothing left, without scanning /proc (~4 ms of CPU on a quiet
    # 2-core VM, taken from the listener and Redis just as the exit is announced): a
    # descendant that outlived the instance is the shim's child (orphans are reparented
    # to it, their subreaper) or below one, or in the instance's group.
    if not _has_children() and not _group_alive(pgid):
        return
    me = os.getpid()
    left = descendants([me])
    if not left and not _group_alive(pgid):
        return
    signal_all(pgid, left, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        _reap_nohang()
        left = descendants([me])
        if not left and not _group_alive(pgid):
            return
        time.sleep(0.02)
    signal_all(pgid, descendants([me]), signal.SIGKILL)
    time.sleep(0.05)
    _reap_nohang()


def _has_children():
    """Does the shim still have a child? Reaps those that have ended on the way."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _tell_launcher(ready_fd, message):
    """Report to the launcher on the ready pipe. A launcher that died (its worker was
    killed mid-launch) closed the pipe: the shim runs on regardless, since state.json
    and exit.json, not the pipe, are what every later reader goes by."""
    try:
        os.write(ready_fd, message)
    except OSError as exc:  # BrokenPipeError: nobody reads the pipe any more
        sys.stderr.write(f"vigil shim: the launcher is gone ({exc}); running on\n")
        sys.stderr.flush()
    try:
        os.close(ready_fd)
    except OSError:
        pass


def run(instance_dir, ready_fd, standby=None):
    """Run one instance: cold, or in `standby` (a _Standby) when spec.json says warm."""
    spec = read_json(os.path.join(instance_dir, SPEC))
    if spec is None:
        _tell_launcher(ready_fd, b"error spec.json missing or unreadable\n")
        if standby is not None:
            standby.discard()
        return 2
    run_no = spec.get("run", 1)
    exit_path = os.path.join(instance_dir, EXIT)
    log_path = os.path.join(instance_dir, spec.get("log", "output.log"))
    _set_child_subreaper()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    user = spec.get("user") or None

    started_at = time.time()
    start, start_reason, pid = "cold", spec.get("start_reason", ""), None
    if standby is not None:
        pid, start_reason = standby.launch(spec, log_fd)
        start = "warm" if pid is not None else "cold"
    error = ""
    if pid is None:
        pid, error = _start_cold(spec, user, log_fd, instance_dir)
    if pid is None:  # could not start at all: recorded as exit 127
        exited_at = time.time()
        record = {
            "exit_code": 127,
            "signal": None,
            "exited_at": exited_at,
            "started_at": started_at,
            "run": run_no,
            "reason": error,
        }
        write_json_atomic(exit_path, record)
        _tell_launcher(ready_fd, b"ok 0\n")
        _announce(spec, record)
        return 0
    os.close(log_fd)
    state = {
        "shim_pid": os.getpid(),
        "shim_start": proc_start_ticks(os.getpid()),
        "child_pid": pid,
        "child_start": proc_start_ticks(pid),  # the child is ours until we reap it, so this is safe
        "pgid": pid,
        "boot_id": boot_id(),
        "started_at": started_at,
        "run": run_no,
        "start": start,
        "start_reason": start_reason,
    }
    write_json_atomic(os.path.join(instance_dir, STATE), state)
    _tell_launcher(ready_fd, b"ok %d\n" % pid)

    # Signals sent to the shim itself (shutdown of the machine, a person) go to the instance.
    def forward(signum, _frame):
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)

    # What the exit will need, made while the instance runs rather than once it ended.
    exit_file = ReservedFile(exit_path)
    announcer = _ExitAnnouncer(spec)
    status = _watch(pid, log_path)
    exited_at = time.time()
    if os.WIFSIGNALED(status):
        exit_code, sig = None, os.WTERMSIG(status)
    else:
        exit_code, sig = os.WEXITSTATUS(status), None
    record = {"exit_code": exit_code, "signal": sig, "exited_at": exited_at, "started_at": started_at, "run": run_no}
    exit_file.write_json(record)  # on disk before anyone is told
    _announce(spec, record, announcer)
    _end_leftovers(pid, float(spec.get("leftover_grace", 2.0)))
    return 0


def _identity(user):
    # Only the child: subprocess calls setgroups, setgid and setuid in that order,
    # after the fork, so the shim stays root (the chdir follows: _enter_after_drop).
    if not user:
        return {}
    return {
        "user": int(user["uid"]),
        "group": int(user["gid"]),
        "extra_groups": [int(g) for g in user.get("groups") or ()],
    }


def _enter_after_drop(cwd, user):
    """Popen's working-directory arguments: `cwd=` for a child that keeps our user; for
    one that drops privileges, a preexec_fn that enters the directory after setuid
    (Popen's own chdir comes before it, as root, and would let the job start in a
    directory its user cannot reach, issue 31). A refused chdir writes why on the
    child's stderr (the log) and exits 127, as a shell does for a command it cannot start."""
    if not user:
        return {"cwd": cwd}
    name = user.get("name") or user["uid"]

    def enter():
        try:
            os.chdir(cwd)
        except OSError as exc:
            os.write(2, f"vigil: cannot enter the working directory as OS user {name}: {exc.strerror}\n".encode())
            os._exit(127)

    return {"cwd": "/", "preexec_fn": enter}


def _start_cold(spec, user, log_fd, instance_dir):
    """Start the command with /bin/sh: (its PID, "") or (None, why it could not start)."""
    import subprocess  # here, not at the top: the fork above should be as cheap as possible

    try:
        child = subprocess.Popen(
            ["/bin/sh", "-c", spec["command"]],
            env=spec.get("env") or {},
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            process_group=0,
            close_fds=True,
            **_identity(user),
            **_enter_after_drop(spec.get("cwd") or instance_dir, user),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        # The command could not even start (missing workdir, no /bin/sh): say so in the
        # log, record it as exit code 127 like a shell would, and announce it.
        as_user = f" as OS user {user.get('name') or user['uid']}" if user else ""
        os.write(log_fd, f"vigil: cannot start the instance{as_user}: {exc}\n".encode())
        return None, f"cannot start: {exc}"
    # Kept referenced: a collected Popen polls its child in __del__ and could reap it
    # before _watch does, losing the exit status.
    _KEEP.append(child)
    return child.pid, ""


_KEEP: list = []


def _watch(pid, log_path):
    """Wait for the child, blocked in waitpid, and return its wait status.

    The exit wakes this thread at once: the monitor's exit latency is the time to
    write exit.json and publish, not a polling interval (a 50 ms WNOHANG loop here
    made announced exits 40-60 ms late, 2.8 ms before). Descendants that left the
    instance's group and ended are reaped on the way (the shim is their subreaper).
    The log's capture times are stamped meanwhile by a thread of their own
    (_LogStamper), the one part that has to look every MARK_INTERVAL."""
    stamper = _LogStamper(log_path)
    stamper.start()
    try:
        while True:
            try:
                reaped, status = os.waitpid(-1, 0)
            except ChildProcessError:  # cannot happen while the child is ours; be safe
                return 255 << 8
            if reaped == pid:
                return status
    finally:
        stamper.finish()


def _deaf_thread(target, name):
    """Start a daemon thread that no signal can reach: a signal sent to the shim (a stop,
    a shutdown) must go to the main thread, whose waitpid it interrupts and whose handler
    forwards it to the instance. The thread inherits the mask it is created with, so it
    is deaf from its first line; the main thread's mask is restored at once after."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return thread


class _ExitAnnouncer:
    """The Redis connection the exit is announced on, opened and authenticated in a
    thread (signal-deaf, _deaf_thread) while the main thread is already in waitpid: an
    instance that ends while Redis is slow to answer (or its name to resolve) is still
    reaped and recorded at once, and only its announcement waits."""

    def __init__(self, spec):
        self.redis = spec.get("redis")
        self.announcer = Announcer(self.redis, REDIS_DEADLINE, _connection_name(spec))
        self.thread = _deaf_thread(self.announcer.open, "redis-connect") if self.redis else None

    def publish(self, payload):
        if self.thread is not None:
            self.thread.join(REDIS_DEADLINE)
            if self.thread.is_alive():  # still resolving or connecting: not ours to use
                return Announcer(self.redis, REDIS_DEADLINE).publish(payload)
        try:
            return self.announcer.publish(payload)
        finally:
            self.announcer.close()


class _LogStamper:
    """Records when the instance's output arrived: every MARK_INTERVAL, if the log
    grew, one (size, time) record is appended to the sidecar beside it
    (core/logtimes.py reads them), so every line has its capture time however it is
    read later. The child writes the log itself; this only looks at its size, so a
    job printing fast is not slowed.

    A thread, so that the shim's main thread can block in waitpid. It runs with every
    signal blocked: a signal sent to the shim (a stop, a shutdown) must reach the main
    thread, whose handler forwards it to the instance; delivered to this thread, the
    main thread's waitpid would not be interrupted and the handler would wait for the
    exit it was meant to cause."""

    def __init__(self, log_path):
        self.log_path = log_path
        self.seen = 0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = None
        try:
            self.fd = os.open(log_path + TIMES_SUFFIX, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            self.fd = None

    def start(self):
        if self.fd is None:
            return
        self.thread = _deaf_thread(self._run, "log-stamper")

    def _run(self):
        while not self.done.wait(MARK_INTERVAL):
            self.mark()

    def mark(self):
        with self.lock:
            if self.fd is None:
                return
            try:
                size = os.stat(self.log_path).st_size
                if size > self.seen:
                    os.write(self.fd, struct.pack("<Qd", size, time.time()))
                    self.seen = size
            except OSError:
                pass

    def finish(self):
        """The last output's stamp, before exit.json says the instance ended; the
        thread is not waited for (it may be mid-sleep), only stopped."""
        self.done.set()
        self.mark()
        with self.lock:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None


def _connection_name(spec):
    """CLIENT SETNAME's: which shim holds the connection (Redis allows no spaces in it)."""
    name = f"vigil-shim:{spec.get('job_id')}/{spec.get('attempt')}/{spec.get('instance')}"
    return "".join(c if "!" <= c <= "~" else "_" for c in name)


def _announce(spec, record, announcer=None):
    payload = json.dumps(
        {
            "job_id": spec.get("job_id"),
            "attempt": spec.get("attempt"),
            "instance": spec.get("instance"),
            "exit_code": record["exit_code"],
            "signal": record["signal"],
            "exited_at": record["exited_at"],
            "run": record["run"],
        }
    )
    (announcer or Announcer(spec.get("redis"), REDIS_DEADLINE)).publish(payload)


class short_socket_path:
    """A unix socket address for `name` in `directory` that fits the 108 bytes AF_UNIX
    allows, however deep the data dir: /proc/self/fd/<directory's fd>/name."""

    def __init__(self, directory, name):
        self.directory, self.name, self.fd = directory, name, None

    def __enter__(self):
        self.fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.fd}/{self.name}"

    def __exit__(self, *exc):
        os.close(self.fd)
        return False


def send_message(sock, data, fds=()):
    """One length-prefixed JSON message (warm_boot._recv_message reads it), `fds` passed along."""
    body = json.dumps(data).encode()
    head = HEADER.pack(len(body))
    if fds:
        sent = socket.send_fds(sock, [head], list(fds))
        if sent < len(head):
            sock.sendall(head[sent:])
    else:
        sock.sendall(head)
    sock.sendall(body)


def _recv_message(sock, timeout):
    """A launcher's message and its fds, or (None, []) if it did not arrive in time."""
    sock.settimeout(timeout)
    try:
        return recv_message(sock)
    except (OSError, ValueError, EOFError):
        return None, []


def _any_shim_alive(attempt_dir):
    """Does any instance of the attempt have a live shim (by state.json's PID and start time)?"""
    try:
        names = os.listdir(attempt_dir)
    except OSError:
        return False
    for name in names:
        if not os.path.isdir(os.path.join(attempt_dir, name)):
            continue
        try:
            state = read_json(os.path.join(attempt_dir, name, STATE))
        except OSError:
            continue
        if state and state.get("shim_pid") and proc_start_ticks(state["shim_pid"]) == state.get("shim_start"):
            return True
    return False


class _Standby:
    """The parked interpreter a parked shim owns."""

    def __init__(self, park_dir, park, child, sock):
        self.park_dir, self.park, self.child, self.sock = park_dir, park, child, sock
        self.parked_at = None
        self.failed = ""
        self._buf = b""

    def alive(self):
        return self.child.poll() is None

    def read_status(self):
        """Take in what the interpreter said ("parked", or why not) without blocking."""
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
            if ready:
                chunk = self.sock.recv(4096)
                self._buf += chunk
                if not chunk and not self.failed:
                    self.failed = "the parked interpreter closed its socket"
        except OSError:
            return
        if b"parked\n" in self._buf and self.parked_at is None:
            self.parked_at = time.time()
        if self._buf.startswith(b"failed"):
            self.failed = self._buf.decode(errors="replace").strip()

    def discard(self):
        if self.alive():
            try:
                os.killpg(self.child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.child.kill()
        self.child.wait()

    def launch(self, spec, log_fd):
        """Hand the attempt to the interpreter; (its PID, "") or (None, why it starts cold)."""
        warm = spec.get("warm")
        self.read_status()
        reason = ""
        if not warm:
            reason = spec.get("start_reason") or "the attempt did not ask for a warm start"
        elif spec.get("user") != self.park.get("user"):
            reason = "the job's OS user changed since the interpreter was parked"
        elif not self.alive() or self.failed:
            reason = f"the parked interpreter is gone ({self.failed or 'it exited'})"
        if reason:
            self.discard()
            return None, reason
        try:
            # Normal priority again before it runs a line of the rank (cold ranks inherit the shim's).
            mine = os.getpriority(os.PRIO_PROCESS, 0)
            for tid in os.listdir(f"/proc/{self.child.pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), mine)
            send_message(
                self.sock,
                {
                    "env": spec.get("env") or {},
                    "cwd": spec.get("cwd"),
                    "kind": warm["kind"],
                    "target": warm["target"],
                    "argv": warm["argv"],
                    "path0": warm["path0"],
                },
                fds=[log_fd],
            )
        except OSError as exc:
            self.discard()
            return None, f"the parked interpreter could not be started ({exc})"
        self.sock.close()
        return self.child.pid, ""


def park(park_dir, ready_fd):
    """Start a parked interpreter and serve as the shim of the instance it is handed."""
    spec = read_json(os.path.join(park_dir, PARK_SPEC))
    if spec is None:
        _tell_launcher(ready_fd, b"error park.json missing or unreadable\n")
        return 2
    _set_child_subreaper()
    import subprocess

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    log_fd = os.open(os.path.join(park_dir, "park.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = subprocess.Popen(
            [spec["python"], BOOT_PATH, str(theirs.fileno()), str(os.getpid())],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            process_group=0,
            close_fds=True,
            pass_fds=(theirs.fileno(),),
            **_identity(spec.get("user")),
            **_enter_after_drop(spec["cwd"], spec.get("user")),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _tell_launcher(ready_fd, f"error cannot start the parked interpreter: {exc}\n".encode())
        return 0
    finally:
        os.close(log_fd)
        theirs.close()
    standby = _Standby(park_dir, spec, child, ours)
    # Low priority only where this shim can raise it back at launch (setpriority needs root).
    # Lowered here rather than by the interpreter itself: a launch that came before the
    # interpreter got to it would have restored the priority first and left the rank niced.
    if os.geteuid() == 0 and int(spec.get("nice", 0)):
        try:
            low = min(19, os.getpriority(os.PRIO_PROCESS, 0) + int(spec["nice"]))
            os.setpriority(os.PRIO_PROCESS, child.pid, low)  # one thread yet: Python has only started
        except OSError:
            pass  # it is gone: the loop below sees it
    send_message(ours, {"path0": spec["path0"], "modules": spec.get("modules") or []})
    ctl_path = os.path.join(park_dir, CTL)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with short_socket_path(park_dir, CTL) as short:
        listener.bind(short)
    listener.listen(4)
    state = {
        "shim_pid": os.getpid(),
        "shim_start": proc_start_ticks(os.getpid()),
        "child_pid": child.pid,
        "child_start": proc_start_ticks(child.pid),
        "boot_id": boot_id(),
        "started_at": time.time(),
        "parked_at": None,
        "ended": None,
    }
    write_json_atomic(os.path.join(park_dir, PARK_STATE), state)
    _tell_launcher(ready_fd, b"ok %d\n" % child.pid)

    ending = []

    def end(signum, _frame):
        ending.append(signum)

    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, end)
    linger = float(spec.get("linger", 60.0))
    watch_dir = spec.get("watch_dir") or ""
    unwatched_since = None
    why = ""
    while True:
        standby.read_status()
        if standby.parked_at and not state["parked_at"]:
            state["parked_at"] = standby.parked_at
            write_json_atomic(os.path.join(park_dir, PARK_STATE), state)
        if ending:
            why = f"discarded (signal {ending[0]})"
        elif not standby.alive() or standby.failed:
            why = standby.failed or f"the parked interpreter exited ({standby.child.returncode})"
        elif watch_dir and not _any_shim_alive(watch_dir):
            unwatched_since = unwatched_since or time.monotonic()
            if time.monotonic() - unwatched_since >= linger:
                why = f"no live instance in {watch_dir} for {linger:g} s"
        else:
            unwatched_since = None
        if why:
            break
        try:
            ready, _, _ = select.select([listener], [], [], PARK_TICK)
        except InterruptedError:
            continue
        if not ready:
            continue
        conn, _ = listener.accept()
        message, fds = _recv_message(conn, 2.0)
        conn.close()
        if not message or not fds or not isinstance(message.get("instance_dir"), str):
            for fd in fds:
                os.close(fd)
            continue
        # Taken: from here on this process is the instance's shim, not a standby.
        for sig in (signal.SIGUSR1,):
            signal.signal(sig, signal.SIG_IGN)
        listener.close()
        _unlink(ctl_path)
        for fd in fds[1:]:
            os.close(fd)
        state["taken_by"] = message["instance_dir"]
        state["ended"] = time.time()
        write_json_atomic(os.path.join(park_dir, PARK_STATE), state)
        return run(message["instance_dir"], fds[0], standby)
    listener.close()
    _unlink(ctl_path)
    standby.discard()
    state["ended"] = time.time()
    state["end_reason"] = why
    write_json_atomic(os.path.join(park_dir, PARK_STATE), state)
    return 0


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def main(argv):
    if argv[1] == "--park":
        park_dir, ready_fd = argv[2], int(argv[3])
        if os.fork() > 0:
            os._exit(0)
        return park(park_dir, ready_fd)
    instance_dir, ready_fd = argv[1], int(argv[2])
    # First process: the launcher waits for it. The forked one is the shim proper.
    if os.fork() > 0:
        os._exit(0)
    try:
        return run(instance_dir, ready_fd)
    except BaseException as exc:  # noqa: BLE001 - report anything to the launcher, then die
        try:
            os.write(ready_fd, f"error {type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
        raise


def _end_now(code):
    """Leave without the interpreter's teardown. Once the exit is announced nothing is left
    to finalise (every file the shim writes goes through os.write and is closed), and the
    teardown is milliseconds of CPU taken, on a 2-core machine, from the listener and Redis
    just as they deliver the announcement: bench/exit_detection.py, announced p99 5.6-6.9 ms
    with it, 3.0 ms without (issue 28)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    _end_now(main(sys.argv) or 0)
