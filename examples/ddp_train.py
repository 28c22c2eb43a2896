"""A small PyTorch DDP training job (CPU, gloo) with injectable faults.

Vigil's demos, tests and benchmarks run this script as every instance of a
PyTorchJob. It trains a tiny model on synthetic data and prints one line per step:

    2026-11-29T23:59:01.123456Z step=12 rank=1 loss=0.4312 step_time=0.051

step_time is the rank's own seconds for the step, without waiting for slower peers.

Environment:
    MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK   env:// rendezvous (required)
    VIGIL_EXAMPLE_STEPS        steps to train (default 50)
    VIGIL_EXAMPLE_SLEEP        extra seconds of "compute" per step on every rank (default 0)
    VIGIL_EXAMPLE_PG_TIMEOUT   gloo collective timeout in seconds (default 1800)
    VIGIL_EXAMPLE_SLOW_SECONDS extra seconds per step of the slow rank (default 0.2)
    VIGIL_EXAMPLE_CHECKPOINT   directory for checkpoints (default unset: none). Rank 0 saves
                               the model, the optimizer and the step there every
                               VIGIL_EXAMPLE_CHECKPOINT_EVERY steps (default 5), atomically;
                               every rank loads the latest one at start and resumes after its
                               step, on the same data an uninterrupted run would see, so a
                               resumed run's losses depend only on (checkpoint, step). Each rank
                               prints "resumed rank=R step=N ..." and rank 0, at the end,
                               "final rank=0 step=N params_sha256=..." (the trained weights)
    VIGIL_EXAMPLE_CHECKPOINT_EVERY  steps between checkpoints (default 5)
    FAULT        crash|nccl|sigkill|sigsegv|hang_collective|hang_compute|exit_hang|slow|nan|bug|
                 skip_collective
    FAULT_RANK   rank that misbehaves (default 1)
    FAULT_STEP   step at which the fault fires (default 10)
    FAULT_ONCE   path of a marker file: the fault fires only if the marker does not
                 exist, and creates it, so that a restarted attempt trains to the end
                 (ignored by FAULT=bug, which is a deterministic bug)

Faults:
    crash            RuntimeError raised in the training loop (exit 1, traceback)
    nccl             an NCCL-style communication error on stderr, exit 1 (retryable)
    sigkill, sigsegv the process kills itself with that signal
    hang_collective  the rank blocks inside a broadcast that its peer never joins
                     (`collective_forever`); the others then wait in the step's
                     all_reduce for it: a hang inside communication (RankCommHang)
    hang_compute     the rank sleeps forever in `compute_forever` and never reaches
                     the all_reduce the others wait in (RankNonCommHang)
    exit_hang        the rank exits 0 early; the others block waiting for it
    skip_collective  a desync: the rank skips the step's loss all_reduce (as a rank-
                     dependent branch would) and waits in a barrier (`skip_collective`)
                     while the others wait in the all_reduce; neither ever completes
    slow             the rank spends VIGIL_EXAMPLE_SLOW_SECONDS more per step in
                     `slow_compute` (a straggler)
    nan              the rank's input turns NaN from that step: the loss is NaN
    bug              ValueError in user code at that step, on every attempt
"""

from __future__ import annotations

import atexit
import datetime as _dt
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

FAULTS = (
    "crash",
    "nccl",
    "sigkill",
    "sigsegv",
    "hang_collective",
    "hang_compute",
    "exit_hang",
    "slow",
    "nan",
    "bug",
    "skip_collective",
)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r} is not valid: expected an integer")


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r} is not valid: expected a number of seconds")


def stamp() -> str:
    """UTC ISO-8601 with microseconds and a Z, as the log parsers expect."""
    now = _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def say(text: str, stream=None) -> None:
    stream = stream or sys.stdout
    stream.write(f"{stamp()} {text}\n")
    stream.flush()


def fault_fires(fault: str) -> bool:
    """FAULT_ONCE: fire only while the marker is absent (created atomically)."""
    marker = os.environ.get("FAULT_ONCE", "")
    if not marker or fault == "bug":
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, f"{fault} fired at {stamp()} pid={os.getpid()}\n".encode())
    os.close(fd)
    return True


# --- the functions a stack snapshot should name --------------------------------


def compute_forever() -> None:
    """Hung in compute: never returns, never enters the next collective."""
    while True:
        time.sleep(1.0)


def collective_forever(group, peer: int) -> None:
    """Hung in communication: waits in a broadcast from `peer`, who never sends."""
    buf = torch.zeros(1)
    dist.broadcast(buf, src=peer, group=group)
    # Only reached if the peer ever broadcasts; it never does.
    compute_forever()


def skip_collective(step: int, rank: int) -> None:
    """Desync: this rank skips the step's loss all_reduce that its peers enter, as a
    rank-dependent branch would, and goes on to the barrier that ends training."""
    say(f"step={step} rank={rank} skipping the loss all_reduce (injected desync)")
    dist.barrier()
    compute_forever()  # only reached if the barrier ever completes; it does not


def slow_compute(seconds: float) -> None:
    time.sleep(seconds)


def wait_for_peers_to_finish_step(store, step: int, rank: int, world: int) -> None:
    """exit_hang: ranks check in through the store; the early-exited rank never does.

    Waiting in the store (not in a gloo collective) keeps the peers blocked: a gloo
    collective would fail at once with "Connection closed by peer".
    """
    store.set(f"vigil-example/step{step}/rank{rank}", "1")
    store.wait([f"vigil-example/step{step}/rank{r}" for r in range(world)])


def nccl_style_failure(rank: int) -> None:
    host = os.uname().nodename
    sys.stderr.write(
        f"{host}:{os.getpid()}:{os.getpid() + 7} [{rank}] NCCL INFO Call to connect returned "
        "Connection reset by peer, retrying\n"
        f"{host}:{os.getpid()}:{os.getpid() + 7} [{rank}] transport/net_socket.cc:541 NCCL WARN "
        "NET/Socket : Connection reset by peer\n"
        "Traceback (most recent call last):\n"
        '  File "ddp_train.py", line 1, in <module>\n'
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error.\n"
        "Last error:\n"
        "socketProgress: Connection reset by peer\n"
    )
    sys.stderr.flush()
    sys.stdout.flush()
    # Exit at once with 1, as a process dying on a communication error does; a
    # normal interpreter exit with the process group still live can let gloo
    # abort the process (SIGABRT) instead.
    os._exit(1)


# --- checkpoints (VIGIL_EXAMPLE_CHECKPOINT) ------------------------------------------

CHECKPOINT_NAME = "latest.pt"


def save_checkpoint(directory: str, step: int, model, opt) -> None:
    """Write then rename: a crash mid-save leaves the previous checkpoint whole, and the
    fsyncs make the rename durable before training goes on (a restarted attempt must
    never load a torn file)."""
    final = os.path.join(directory, CHECKPOINT_NAME)
    tmp = f"{final}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint(directory: str, model, opt) -> int:
    """The step of the latest checkpoint, loaded into model and opt; 0 when there is none."""
    path = os.path.join(directory, CHECKPOINT_NAME)
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return int(state["step"])


def params_digest(model) -> str:
    """sha256 of the weights' bytes: equal only if training gave bit-identical results."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        # Through uint8 rather than .numpy(): the example must not need numpy.
        digest.update(bytes(tensor.detach().contiguous().flatten().view(torch.uint8).tolist()))
    return digest.hexdigest()


# --- optional SDK hooks ----------------------------------------------------------


def sdk_hooks():
    """Return report_progress(step) or None; never let the SDK stop training."""
    if not os.environ.get("VIGIL_JOB_ID"):
        return None
    try:
        import vigil  # another package; absent when run standalone
    except Exception:
        return None
    if os.environ.get("VIGIL_C4D") == "1":
        try:
            import vigil.c4d

            vigil.c4d.instrument_torch_distributed()
        except Exception as exc:  # a broken SDK must not stop the job
            say(f"vigil c4d instrumentation unavailable: {exc!r}", sys.stderr)
    report = getattr(vigil, "report_progress", None)
    if report is None:
        try:
            from vigil import job_monitor

            report = getattr(job_monitor, "report_progress", None)
        except Exception:
            report = None
    if report is None:
        return None

    def progress(step: int, loss: float) -> None:
        try:
            report(step=step, metrics={"loss": loss})
        except TypeError:
            report(step=step)
        except Exception:
            pass

    return progress


# --- training ------------------------------------------------------------------


def main() -> int:
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        if not os.environ.get(name):
            sys.exit(f"{name} is not set: the env:// rendezvous needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK")
    rank = _env_int("RANK", 0)
    world = _env_int("WORLD_SIZE", 1)
    steps = _env_int("VIGIL_EXAMPLE_STEPS", 50)
    sleep = _env_float("VIGIL_EXAMPLE_SLEEP", 0.0)
    pg_timeout = _env_float("VIGIL_EXAMPLE_PG_TIMEOUT", 1800.0)
    slow_seconds = _env_float("VIGIL_EXAMPLE_SLOW_SECONDS", 0.2)
    fault = os.environ.get("FAULT", "")
    if fault and fault not in FAULTS:
        sys.exit(f"FAULT={fault!r} is not valid: expected one of {', '.join(FAULTS)}")
    fault_rank = _env_int("FAULT_RANK", 1)
    fault_step = _env_int("FAULT_STEP", 10)
    faulty = bool(fault) and rank == fault_rank
    ckpt_dir = os.environ.get("VIGIL_EXAMPLE_CHECKPOINT", "")
    ckpt_every = _env_int("VIGIL_EXAMPLE_CHECKPOINT_EVERY", 5)
    if ckpt_every < 1:
        sys.exit(f"VIGIL_EXAMPLE_CHECKPOINT_EVERY={ckpt_every} is not valid: expected at least 1")
    if ckpt_dir:
        os.makedirs(ckpt_dir, exist_ok=True)

    torch.manual_seed(1234)
    torch.set_num_threads(1)
    dist.init_process_group(
        backend="gloo",
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=_dt.timedelta(seconds=pg_timeout),
    )
    # Collective groups must be created by every rank in the same order.
    side_peer = 0 if fault_rank != 0 else 1
    side_group = None
    if fault == "hang_collective" and world > 1:
        side_group = dist.new_group(ranks=sorted({side_peer, fault_rank}))
    store = dist.distributed_c10d._get_default_store() if fault == "exit_hang" else None

    progress = sdk_hooks()
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # Loaded before DDP wraps the model (DDP broadcasts rank 0's weights at construction);
    # every rank reads the same file, which the old attempt finished before it was reaped.
    resumed = load_checkpoint(ckpt_dir, model, opt) if ckpt_dir else 0
    ddp = nn.parallel.DistributedDataParallel(model)
    gen = torch.Generator().manual_seed(rank)
    true_w = torch.randn(32, 1, generator=torch.Generator().manual_seed(7)) / 32**0.5
    # Replay the batches of the steps already done, so that step N's batch is the one an
    # uninterrupted run draws at step N: the losses after a resume are then a function of
    # (checkpoint, step) alone, whichever attempt or interpreter runs them.
    for _ in range(resumed):
        torch.randn(16, 32, generator=gen)
        torch.randn(16, 1, generator=gen)
    if resumed:
        say(f"resumed rank={rank} step={resumed} from={os.path.join(ckpt_dir, CHECKPOINT_NAME)}")
    say(
        f"start rank={rank} world_size={world} steps={steps} pid={os.getpid()}"
        + (f" fault={fault} fault_rank={fault_rank} fault_step={fault_step}" if fault else "")
    )

    poisoned = False
    skipping = False
    for step in range(resumed + 1, steps + 1):
        t0 = time.perf_counter()
        x = torch.randn(16, 32, generator=gen)
        y = x @ true_w + 0.01 * torch.randn(16, 1, generator=gen)
        if faulty and step == fault_step and fault_fires(fault):
            if fault == "crash":
                raise RuntimeError(f"injected crash at step {step} on rank {rank}")
            if fault == "bug":
                raise ValueError(f"bad batch shape at step {step}: expected (16, 32), got (16, 31)")
            if fault == "nccl":
                nccl_style_failure(rank)
            if fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "sigsegv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if fault == "hang_compute":
                say(f"step={step} rank={rank} entering compute_forever (injected hang)")
                compute_forever()
            if fault == "hang_collective":
                say(f"step={step} rank={rank} entering collective_forever (injected hang)")
                collective_forever(side_group, side_peer)
            if fault == "exit_hang":
                say(f"step={step} rank={rank} finished early (injected exit hang)")
                return 0
            if fault == "nan":
                poisoned = True
            if fault == "skip_collective":
                skipping = True
        if fault == "exit_hang" and not faulty and step == fault_step:
            wait_for_peers_to_finish_step(store, step, rank, world)
        if faulty and fault == "slow" and step >= fault_step:
            slow_compute(slow_seconds)
        if poisoned:
            x = x * float("nan")
        if sleep > 0:
            time.sleep(sleep)

        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        # An explicit collective per step, before backward: the mean loss, and the
        # call the SDK's C4D instrumentation sees (DDP's gradient all-reduce runs in
        # C++ and is invisible to it). A rank hung before here is hung in compute.
        mean = loss.detach().clone()
        t_wait = time.perf_counter()
        if skipping:
            skip_collective(step, rank)
        else:
            dist.all_reduce(mean)
        waited = time.perf_counter() - t_wait
        mean /= world
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        # The rank's own time for the step: without the wait for slower peers in the
        # loss all-reduce, so a straggler shows in its own line (in synchronous
        # training every rank's wall-clock step is the slowest rank's).
        step_time = time.perf_counter() - t0 - waited
        local = loss.item()
        say(f"step={step} rank={rank} loss={local:.4f} step_time={step_time:.3f}")
        if progress is not None and rank == 0:
            progress(step, float(mean.item()))
        if ckpt_dir and rank == 0 and step % ckpt_every == 0:
            save_checkpoint(ckpt_dir, step, model, opt)
            say(f"checkpoint rank={rank} step={step}")

    if ckpt_dir and rank == 0:
        say(f"final rank={rank} step={steps} params_sha256={params_digest(model)}")

    say(f"done rank={rank} steps={steps}")
    # The DDP wrapper goes first, while the default group still holds the process group:
    # were its Reducer the last holder, the group would be destroyed when main() returns,
    # on this thread with the GIL held, joining gloo's worker threads - and a worker that
    # is still dropping a finished work with Python references in it (a tensor, autograd's
    # stashed contextvars.Context) waits for that GIL forever (pybind11 does not release
    # it for the Reducer; pytorch/pytorch#56297). destroy_process_group then drops the last
    # reference through the ProcessGroup binding, which releases the GIL. Which object holds
    # the group last depends on import order: with torch._dynamo imported before
    # init_process_group (a warm restart's parked interpreter), it is the Reducer.
    del ddp
    # Tear down together: a rank that destroys its process group while a peer is
    # still using its connections can make gloo abort that peer at exit.
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without interpreter finalization: even after destroy_process_group, gloo's
    # C++ threads can still hold tensors with Python references, and destroying them
    # while the interpreter is torn down aborts the rank ("terminate called without an
    # active exception", SIGABRT) after it trained to the end (pytorch/pytorch#179291).
    # The exit handlers (the SDK's last progress report, C4D's recorder) still run.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
