"""A replica-group training job on torchft (CPU, gloo), written for Vigil's `--replica-groups=N`.

Each replica group is an ordinary data-parallel group with its own rendezvous; torchft's
Manager keeps a quorum of the groups through the job's Lighthouse and all-reduces the
gradients across the groups that are in it. When a group dies the others go on stepping
with a smaller quorum; Vigil restarts the dead group alone, and its Manager recovers the
weights from a healthy peer before its first step in the joint quorum.

Vigil's local backend sets, for every instance of a job with replica groups:
    TORCHFT_LIGHTHOUSE     http://host:port of the job's Lighthouse
    REPLICA_GROUP_ID       0..N-1, this instance's group
    NUM_REPLICA_GROUPS     N
    MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE   the group's own rendezvous (rank within it)
    TORCHFT_MANAGER_PORT   the port of the group's Manager server (group rank 0 only)

The Manager advertises this machine's host name to its peers for weight recovery (the
`hostname` argument below, default ``socket.gethostname()``): that name must resolve, from
every other group's node, to this node. On one machine it always does.

One line per committed or skipped step:

    2026-12-03T13:59:01.123456Z step=12 rank=0 group=1 participants=2 committed=True loss=0.4312

`step` is the Manager's step (the same in every group of a quorum), `committed=False` a
step whose all-reduce failed (a peer group died in it) and which was therefore not applied.

Why not torchft's DistributedDataParallel: its communication hook asserts on the future of
an all-reduce that has already errored (`assert fut._fut` in torchft/ddp.py, torchft 0.2.0),
so a peer that dies mid all-reduce crashes the healthy group too. This script all-reduces
the flattened gradients itself and lets an errored all-reduce become a step that does not
commit (Manager.report_error, then should_commit answers False), which is what the Manager
documents for a corrupted gradient.

Environment (besides the above):
    VIGIL_EXAMPLE_STEPS   steps to train (default 50)
    VIGIL_EXAMPLE_SLEEP   extra seconds of "compute" per step (default 0)
    VIGIL_EXAMPLE_TIMEOUT seconds for the Manager's collectives and RPCs (default 10)
    FAULT                 sigkill | sigkill_in_allreduce   (default none)
    FAULT_GROUP           the group that misbehaves (default 1)
    FAULT_STEP            the step at which it does (default 10); sigkill_in_allreduce waits
                          from there for a step whose quorum holds another group, the peer
                          it dies on (a group can train alone while the others start)
    FAULT_ONCE            marker file: the fault fires only while it does not exist
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        sys.exit(f"{name}={raw!r} is not valid: expected an integer")


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        sys.exit(f"{name}={raw!r} is not valid: expected a number")


def say(text: str) -> None:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    sys.stdout.write(f"{now} {text}\n")
    sys.stdout.flush()


def fault_fires() -> bool:
    marker = os.environ.get("FAULT_ONCE", "")
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, f"fired pid={os.getpid()}\n".encode())
    os.close(fd)
    return True


def batch(step: int, group: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same data for (step, group, rank) in every run: a restarted group sees what it would have."""
    g = torch.Generator().manual_seed(step * 1009 + group * 101 + rank)
    x = torch.randn(32, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def main() -> int:
    from torchft import Manager, ProcessGroupGloo

    steps = _env_int("VIGIL_EXAMPLE_STEPS", 50)
    pause = _env_float("VIGIL_EXAMPLE_SLEEP", 0.0)
    timeout = timedelta(seconds=_env_float("VIGIL_EXAMPLE_TIMEOUT", 10.0))
    group = _env_int("REPLICA_GROUP_ID", 0)
    rank = _env_int("RANK", 0)
    fault = os.environ.get("FAULT", "")
    fault_group = _env_int("FAULT_GROUP", 1)
    fault_step = _env_int("FAULT_STEP", 10)
    if fault not in ("", "sigkill", "sigkill_in_allreduce"):
        sys.exit(f"FAULT={fault!r} is not valid: expected sigkill or sigkill_in_allreduce")

    # The group's own rendezvous (env://): it also starts the TCPStore the Manager needs.
    dist.init_process_group("gloo", timeout=timeout)
    say(f"rendezvous rank={rank} group={group} world={dist.get_world_size()}")
    torch.manual_seed(0)  # every group starts from the same weights; a recovering one heals anyway
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def load_state(state: dict) -> None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        load_state_dict=load_state,
        state_dict=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
        min_replica_size=1,
        replica_id=f"vigil_group_{group}",
        timeout=timeout,
        quorum_timeout=timeout * 3,
        connect_timeout=timeout,
        use_async_quorum=False,
    )
    say(f"started rank={rank} group={group} pid={os.getpid()}")
    params = [p for p in model.parameters()]
    loss_value = float("nan")
    while manager.current_step() < steps:
        step = manager.current_step()
        manager.start_quorum()
        opt.zero_grad()
        x, y = batch(step, group, rank)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if dist.get_world_size() > 1:
            dist.all_reduce(flat)  # within the group: a peer dying here fails the whole group
            flat /= dist.get_world_size()
        if (
            fault == "sigkill_in_allreduce"
            and group == fault_group
            and step >= fault_step
            and manager.num_participants() > 1  # alone, there is no peer to die on
            and fault_fires()
        ):
            # The peers are in this step's all-reduce, waiting for this group's share: give
            # them time to be blocked in it, then die there ("Connection closed by peer").
            say(f"step={step} rank={rank} group={group} dying inside the all-reduce (injected)")
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        work = manager.allreduce(flat)  # across the groups in the quorum, averaged
        try:
            work.wait()
        except Exception as exc:  # an errored all-reduce: the step must not commit
            manager.report_error(exc)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p))
            offset += n
        committed = manager.should_commit()
        if committed:
            opt.step()
            loss_value = loss.item()
        say(
            f"step={manager.current_step()} rank={rank} group={group} "
            f"participants={manager.num_participants()} committed={committed} loss={loss.item():.4f}"
        )
        if fault == "sigkill" and group == fault_group and step >= fault_step and fault_fires():
            say(f"step={step} rank={rank} group={group} killing itself (injected)")
            os.kill(os.getpid(), signal.SIGKILL)
        if pause:
            time.sleep(pause)
    say(f"final rank={rank} group={group} step={manager.current_step()} loss={loss_value:.6f}")
    manager.shutdown(wait=False)
    dist.destroy_process_group()
    return 0 if math.isfinite(loss_value) else 1


if __name__ == "__main__":
    sys.exit(main())
