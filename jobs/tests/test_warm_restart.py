"""Warm restarts on the local backend with real processes (issue 19): a rank run by a
parked interpreter sees what a cold one sees, ends the same way, and the parked
interpreters never outlive their job."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap

import pytest

from jobs.backends.shim import PARK_STATE, proc_start_ticks
from testsupport.jobs import job_writable, let_jobs_reach
from jobs.tests.test_local_backend import Backends, attempt, wait_finished, wait_until

# A light module stands in for torch: the test checks it was imported before the rank
# ran (warm) or not (cold), not how long torch takes.
WARM_MODULES = ("decimal",)

PROBE = textwrap.dedent("""
    import json, os, re, signal, sys
    preloaded = "decimal" in sys.modules
    main = sys.modules["__main__"]
    report = {
        "argv": sys.argv, "name": __name__, "file": __file__, "main_is_us": vars(main) is globals(),
        "main_names": sorted(k for k in vars(main) if k not in ("preloaded", "main")),
        "spec": re.sub(" at 0x[0-9a-f]+", "", repr(__spec__)), "loader": type(__loader__).__name__, "package": __package__,
        "env": dict(os.environ), "cwd": os.getcwd(), "path0": sys.path[0],
        "sigterm": repr(signal.getsignal(signal.SIGTERM)), "sigint": repr(signal.getsignal(signal.SIGINT)),
        "sigpipe": repr(signal.getsignal(signal.SIGPIPE)), "stdin": sys.stdin.read(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0), "uid": os.getuid(), "pgid_is_pid": os.getpgid(0) == os.getpid(),
        "parent_leads_group": os.getpgid(0) == os.getppid(),
        "stdout_tty": sys.stdout.isatty(), "unbuffered": sys.stdout.write_through,
    }
    print("REPORT " + json.dumps(report, sort_keys=True))
    print("PRELOADED", preloaded)
    print("to stderr", file=sys.stderr)
    how = sys.argv[1] if len(sys.argv) > 1 else ""
    if how.startswith("exit:"):
        sys.exit(int(how[5:]))
    if how == "raise":
        raise ValueError("boom from the rank")
    if how == "kbd":
        raise KeyboardInterrupt
    if how.startswith("signal:"):
        os.kill(os.getpid(), int(how[7:]))
""")


@pytest.fixture
def backends(tmp_path):
    let_jobs_reach(tmp_path)
    made = Backends(tmp_path / "data")
    yield made
    made.teardown()  # stop_everything: parked shims and interpreters too


@pytest.fixture
def work(tmp_path):
    path = job_writable(str(tmp_path / "work"))
    pkg = os.path.join(path, "pkg")
    os.makedirs(pkg, exist_ok=True)
    for name, text in (
        ("probe.py", PROBE),
        (os.path.join("pkg", "__init__.py"), ""),
        (os.path.join("pkg", "probe.py"), PROBE),
    ):
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(path, name), 0o644)
    os.chmod(pkg, 0o755)
    return path


def launch(backend, command, work, number, job_id="warmjob", **kw):
    kw.setdefault("job_type", "PyTorchJob")
    kw.setdefault("replicas", {"Master": 1, "Worker": 1} if kw["job_type"] == "PyTorchJob" else {"Worker": 1})
    kw.setdefault("warm_modules", WARM_MODULES)
    return backend.launch(
        attempt(command, job_id=job_id, number=number, workdir=work, warm=True, env={"EPOCHS": "3"}, **kw)
    )


def park_states(backend, job_id, number):
    root = os.path.join(backend.data_dir, "jobs", job_id, "warm", f"attempt-{number}")
    out = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        with open(os.path.join(root, name, PARK_STATE)) as f:
            out[name] = json.load(f)
    return out


def wait_parked(backend, job_id, number, count):
    def ready():
        try:
            states = park_states(backend, job_id, number)
        except (OSError, ValueError):
            return None
        return states if len(states) == count and all(s.get("parked_at") for s in states.values()) else None

    return wait_until(ready, timeout=60)


def alive(pid, start):
    return proc_start_ticks(pid) == start


def instance_state(backend, handle, name):
    with open(os.path.join(handle["dir"], name, "state.json")) as f:
        return json.load(f)


def reports(backend, handle):
    out = {}
    for inst in handle["instances"]:
        log = backend.read_log(handle, inst["name"]).decode()
        line = next(line for line in log.splitlines() if line.startswith("REPORT "))
        report = json.loads(line[len("REPORT ") :])
        report["preloaded"] = "PRELOADED True" in log
        report["stderr_in_log"] = "to stderr" in log
        out[inst["name"]] = report
    return out


def normalised(report, handle):
    """What must be equal between attempts: the attempt's own numbers and dirs replaced."""
    text = json.dumps(report, sort_keys=True)
    text = text.replace(f"attempt-{handle['attempt']}", "attempt-N")
    for port in handle["ports"].values():
        text = re.sub(rf"\b{port}\b", "PORT", text)
    data = json.loads(text)
    data["env"].pop("VIGIL_ATTEMPT", None)
    data.pop("preloaded")
    return data


def test_a_warm_rank_sees_what_a_cold_one_sees(backends, work):
    backend = backends()
    command = f"{sys.executable} probe.py plain 'two words'"
    first = launch(backend, command, work, 1)
    wait_finished(backend, first, timeout=30)
    standby = wait_parked(backend, "warmjob", 2, 2)
    warm_root = os.path.join(backend.data_dir, "jobs", "warmjob", "warm")
    for d in (warm_root, os.path.join(warm_root, "attempt-2"), os.path.join(warm_root, "attempt-2", "master-0")):
        assert os.stat(d).st_mode & 0o777 == 0o700  # no job reaches a control socket
    for state in standby.values():  # parked at the lowest priority, as the job's user
        with open(f"/proc/{state['child_pid']}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[16]) == (19 if os.geteuid() == 0 else 0)
    second = launch(backend, command, work, 2)
    wait_finished(backend, second, timeout=30)

    for name in ("master-0", "worker-0"):
        assert instance_state(backend, first, name)["start"] == "cold"
        assert "first attempt" in instance_state(backend, first, name)["start_reason"]
        assert instance_state(backend, second, name)["start"] == "warm"
        assert instance_state(backend, second, name)["child_pid"] == standby[name]["child_pid"]
    assert {s.name: s.start for s in backend.poll(second)} == {"master-0": "warm", "worker-0": "warm"}
    cold, warm = reports(backend, first), reports(backend, second)
    for name in cold:
        assert not cold[name]["preloaded"] and warm[name]["preloaded"]
        assert normalised(warm[name], second) == normalised(cold[name], first)
    master = warm["master-0"]
    assert master["argv"] == ["probe.py", "plain", "two words"]
    assert master["file"] == os.path.join(work, "probe.py") and master["path0"] == work
    assert master["name"] == "__main__" and master["main_is_us"] and master["cwd"] == work
    assert master["sigterm"] == "<Handlers.SIG_DFL: 0>" and master["stdin"] == "" and master["nice"] == 0
    assert master["env"]["RANK"] == "0" and master["env"]["WORLD_SIZE"] == "2"
    assert master["env"]["MASTER_PORT"] == str(second["master_port"]) and master["env"]["EPOCHS"] == "3"
    assert master["stderr_in_log"]
    assert list(backend.read_log(second, "master-0").decode().splitlines())[-1] == "to stderr"


def test_a_warm_module_entry_point_sees_what_python_dash_m_gives(backends, work):
    backend = backends()
    command = f"{sys.executable} -m pkg.probe x"
    first = launch(backend, command, work, 1, job_type="ElasticBatchJob")
    wait_finished(backend, first, timeout=30)
    wait_parked(backend, "warmjob", 2, 1)
    second = launch(backend, command, work, 2, job_type="ElasticBatchJob")
    wait_finished(backend, second, timeout=30)
    assert instance_state(backend, second, "worker-0")["start"] == "warm"
    cold, warm = reports(backend, first)["worker-0"], reports(backend, second)["worker-0"]
    assert normalised(warm, second) == normalised(cold, first)
    assert warm["argv"] == [os.path.join(work, "pkg", "probe.py"), "x"] and warm["path0"] == work
    assert "ModuleSpec(name='pkg.probe'" in warm["spec"]


@pytest.mark.parametrize(
    ("how", "exit_code", "sig"),
    [
        ("exit:3", 3, None),
        ("exit:0", 0, None),
        ("raise", 1, None),
        ("kbd", 130, None),
        ("signal:15", 143, None),
        ("signal:9", 137, None),  # /bin/sh reports 128+N
    ],
)
def test_a_warm_rank_ends_with_the_exit_code_or_signal_of_a_cold_one(backends, work, how, exit_code, sig):
    backend = backends()
    command = f"{sys.executable} probe.py {how}"
    first = launch(backend, command, work, 1, job_type="ElasticBatchJob", job_id=f"ends{abs(hash(how))}")
    cold = wait_finished(backend, first, timeout=30)[0]
    wait_parked(backend, f"ends{abs(hash(how))}", 2, 1)
    second = launch(backend, command, work, 2, job_type="ElasticBatchJob", job_id=f"ends{abs(hash(how))}")
    warm = wait_finished(backend, second, timeout=30)[0]
    assert warm.start == "warm" and cold.start == "cold"
    assert (warm.exit_code, warm.signal) == (cold.exit_code, cold.signal) == (exit_code, sig)
    assert warm.state == cold.state
    if how == "raise":
        log = backend.read_log(second, "worker-0").decode()
        assert "ValueError: boom from the rank" in log and "warm_boot" not in log
        tb = log[log.index("Traceback") :]
        cold_log = backend.read_log(first, "worker-0").decode()
        assert tb == cold_log[cold_log.index("Traceback") :]


# A warm module whose import lasts until the test opens its gate: "open" lets it finish,
# "fail" makes it raise.
GATED = textwrap.dedent("""
    import os, time
    gate = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate")
    while not os.path.exists(gate):
        time.sleep(0.02)
    with open(gate) as f:
        if f.read() == "fail":
            raise RuntimeError("the gate said fail")
""")


@pytest.mark.parametrize("gate", ["open", "fail"])
def test_a_restart_handed_over_while_the_interpreter_still_imports_runs_the_rank_in_its_log(backends, work, gate):
    # A restart soon after the attempt started (or a slow machine) finds its standby still
    # importing: the shim sends the launch and closes its end of the socket at once. The
    # interpreter once reported "parked" on that closed socket and died of the broken pipe:
    # exit 1, nothing in the rank's log, the reason only in the standby's park.log.
    with open(os.path.join(work, "gated.py"), "w") as f:
        f.write(GATED)
    os.chmod(os.path.join(work, "gated.py"), 0o644)
    backend = backends()
    command = f"{sys.executable} probe.py"
    first = launch(backend, command, work, 1, job_type="ElasticBatchJob", warm_modules=("gated",))
    wait_finished(backend, first, timeout=30)
    standby = wait_until(lambda: park_states(backend, "warmjob", 2).get("worker-0"), timeout=30)
    second = launch(backend, command, work, 2, job_type="ElasticBatchJob", warm_modules=("gated",))
    assert not park_states(backend, "warmjob", 2)["worker-0"]["parked_at"]  # handed over mid-import
    assert instance_state(backend, second, "worker-0")["start"] == "warm"
    with open(os.path.join(work, "gate.tmp"), "w") as f:
        f.write(gate)
    os.chmod(os.path.join(work, "gate.tmp"), 0o644)
    os.replace(os.path.join(work, "gate.tmp"), os.path.join(work, "gate"))
    [status] = wait_finished(backend, second, timeout=30)
    assert status.start == "warm" and instance_state(backend, second, "worker-0")["child_pid"] == standby["child_pid"]
    log = backend.read_log(second, "worker-0").decode()
    if gate == "open":
        assert status.exit_code == 0, log
        warm, cold = reports(backend, second)["worker-0"], reports(backend, first)["worker-0"]
        assert normalised(warm, second) == normalised(cold, first)  # at normal priority, too
    else:  # the launch crossed the failure: the rank says why, as a command /bin/sh cannot start
        assert status.exit_code == 127
        assert log == (
            "vigil: the parked interpreter could not start the rank: failed import gated: "
            "RuntimeError: the gate said fail\n"
        )


def test_a_command_that_is_not_a_python_entry_point_starts_cold_and_parks_nothing(backends, work):
    backend = backends()
    command = f"{sys.executable} probe.py && echo done"
    first = launch(backend, command, work, 1, job_type="ElasticBatchJob")
    wait_finished(backend, first, timeout=30)
    assert park_states(backend, "warmjob", 2) == {}
    second = launch(backend, command, work, 2, job_type="ElasticBatchJob")
    wait_finished(backend, second, timeout=30)
    state = instance_state(backend, second, "worker-0")
    assert state["start"] == "cold" and "shell syntax" in state["start_reason"]
    assert "done" in backend.read_log(second, "worker-0").decode()


def test_parked_interpreters_die_with_the_job(backends, work):
    backend = backends(standby_linger=0.5)
    command = f"{sys.executable} probe.py"
    # Discarded when the job is stopped (finish_stop calls discard_standby).
    first = launch(backend, command, work, 1, job_id="stopped")
    parked = wait_parked(backend, "stopped", 2, 2)
    pids = [(s[k], s[k.replace("pid", "start")]) for s in parked.values() for k in ("shim_pid", "child_pid")]
    assert all(alive(*p) for p in pids)
    backend.stop(first)
    assert sorted(backend.discard_standby("stopped")) == sorted(p for p, _ in pids)
    wait_until(lambda: not any(alive(*p) for p in pids), timeout=10)
    # Gone by themselves once the attempt they stand by for has ended and no restart came
    # (a job that failed or succeeded, or whose console is gone).
    launch(backend, command, work, 1, job_id="ended")
    parked = wait_parked(backend, "ended", 2, 2)
    pids = [(s[k], s[k.replace("pid", "start")]) for s in parked.values() for k in ("shim_pid", "child_pid")]
    wait_until(lambda: not any(alive(*p) for p in pids), timeout=15)
    assert all("no live instance" in s["end_reason"] for s in park_states(backend, "ended", 2).values())
    # And killed by PID with everything else when the data dir is torn down, even if the shim
    # itself was killed first (the interpreter dies with its shim).
    launch(backend, command + " exit:0", work, 1, job_id="killed")
    parked = wait_parked(backend, "killed", 2, 2)
    state = parked["master-0"]
    os.kill(state["shim_pid"], signal.SIGKILL)
    wait_until(lambda: not alive(state["child_pid"], state["child_start"]), timeout=10)
