"""A warm rank keeps the gloo process group as long as a cold rank does (issue 19).

A cold rank imports torch._dynamo (and with it torch.distributed.nn.functional, whose
collectives take ``group=group.WORLD`` as a default) inside DistributedDataParallel,
after its init_process_group: those defaults hold the group until the interpreter
ends. A parked interpreter imported them before any group existed, so the DDP
Reducer held the group's last reference, and a script that destroys the group at the
end of main() with its DDP model still a local had the group destroyed at main()'s
return, in the Reducer's destructor with the GIL held, joining a gloo worker that
waits for the GIL: a hang about 1 run in 7. What decides it is seen every time:
whether the group's gloo workers are still there once main() has returned.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from core.flags import DEFAULT_WARM_MODULES
from jobs.backends import shim

BOOT = Path(shim.__file__).with_name("warm_boot.py")

# The common pattern: destroy_process_group() at the end of main(), the DDP model a local.
COMMON_PATTERN = textwrap.dedent("""
    import os
    import torch, torch.distributed as dist, torch.nn as nn

    def gloo_workers():
        tasks = os.listdir("/proc/self/task")
        return sum(open(f"/proc/self/task/{t}/comm").read().strip() == "pt_gloo_runloop" for t in tasks)

    def main():
        dist.init_process_group("gloo", rank=0, world_size=1)
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
        ddp(torch.randn(2, 4)).sum().backward()
        dist.barrier()
        dist.destroy_process_group()

    main()
    print(f"gloo workers after main returned: {gloo_workers()}", flush=True)
""")


def _rank_env():
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "0",
        "WORLD_SIZE": "1",
        "RANK": "0",
        "PYTHONUNBUFFERED": "1",
    }


def _cold(script):
    done = subprocess.run(
        [sys.executable, script.name],
        cwd=script.parent,
        env=_rank_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _warm(script, log_path):
    ours, theirs = socket.socketpair()
    boot = subprocess.Popen(
        [sys.executable, str(BOOT), str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        cwd=script.parent,
        env=_rank_env(),
        stdin=subprocess.DEVNULL,
        process_group=0,
    )
    try:
        theirs.close()
        shim.send_message(ours, {"path0": str(script.parent), "modules": list(DEFAULT_WARM_MODULES)})
        ours.settimeout(180)
        assert ours.recv(100) == b"parked\n"
        with open(log_path, "wb") as log:
            shim.send_message(
                ours,
                {
                    "env": _rank_env(),
                    "cwd": str(script.parent),
                    "kind": "script",
                    "target": script.name,
                    "argv": [script.name],
                    "path0": str(script.parent),
                },
                fds=[log.fileno()],
            )
        ours.close()
        assert boot.wait(timeout=180) == 0, log_path.read_text()
    finally:
        if boot.poll() is None:
            os.killpg(boot.pid, signal.SIGKILL)  # its group: the interpreter and the rank it forked
            boot.wait()
    return log_path.read_text()


def test_a_warm_rank_keeps_the_process_group_past_main_as_a_cold_one_does(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(COMMON_PATTERN)
    cold = _cold(script)
    assert "gloo workers after main returned: 2" in cold, cold  # the defaults hold the group
    warm = _warm(script, tmp_path / "warm.log")
    assert "gloo workers after main returned: 2" in warm, warm
