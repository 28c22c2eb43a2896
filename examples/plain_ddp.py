"""A DDP training loop (CPU, gloo) that never imports vigil: C4D without code changes, in
Vigil's tests and bench/c4d_overhead.py. A DDP model, and per step the explicit all_reduce
of the loss most loops log. PLAIN_STEPS steps (default 16), then rank 0 prints
"timing rank=0 steps=N skip=K seconds_per_step=S" (wall clock from step K to the end,
PLAIN_SKIP, default 0), every rank "vigil-in-job=<bool>" (whether the job's own module
namespace holds a vigil), and it exits 0.
  PLAIN_FAULT=slow_compute  rank PLAIN_FAULT_RANK spends PLAIN_SLOW_SECONDS more per step
                            before the all_reduce (a straggler: RankNonCommSlow)
  PLAIN_FAULT=slow_comm     rank PLAIN_FAULT_RANK's all_reduce returns PLAIN_SLOW_SECONDS
                            after its data arrived (its tensor's __torch_function__, which
                            all_reduce dispatches to, waits after the real collective): slow
                            inside communication after every rank arrived (RankCommSlow)
PLAIN_SLEEP: extra seconds of compute per step on every rank (default 0).
PLAIN_DDP=0: no DDP; the gradients are all_reduce'd explicitly, as code before DDP did
(needed to see a rank slow inside a collective: with DDP its peers wait for it in DDP's
gradient all-reduce, which runs in C++ where no SDK wrapper sees it, so the SDK reads
their wait as time outside collectives).
PLAIN_IMPORT_SDK=1 makes it the SDK path instead: it imports vigil.c4d and instruments
torch.distributed itself, as a job that uses the SDK does."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

RANK = int(os.environ["RANK"])
FAULT = os.environ.get("PLAIN_FAULT", "")
FAULT_RANK = int(os.environ.get("PLAIN_FAULT_RANK", "1"))
SLOW = float(os.environ.get("PLAIN_SLOW_SECONDS", "0.15"))


class SlowToSync(torch.Tensor):
    """A tensor whose all_reduce finishes late on this rank (a slow link, as seen from it)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is dist.distributed_c10d.all_reduce:
            out = func(args[0].as_subclass(torch.Tensor), *args[1:], **(kwargs or {}))
            time.sleep(SLOW)
            return out
        return super().__torch_function__(func, types, args, kwargs)


def main() -> None:
    if os.environ.get("PLAIN_IMPORT_SDK") == "1":
        import vigil.c4d

        assert vigil.c4d.instrument_torch_distributed()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ddp = os.environ.get("PLAIN_DDP", "1") == "1"
    model: nn.Module = nn.Linear(8, 1)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps, skip = int(os.environ.get("PLAIN_STEPS", "16")), int(os.environ.get("PLAIN_SKIP", "0"))
    sleep = float(os.environ.get("PLAIN_SLEEP", "0"))
    started = time.perf_counter()
    for step in range(1, steps + 1):
        if step == skip + 1:
            started = time.perf_counter()
        if sleep:
            time.sleep(sleep)
        if FAULT == "slow_compute" and RANK == FAULT_RANK and step >= 2:
            time.sleep(SLOW)
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        slow_link = FAULT == "slow_comm" and RANK == FAULT_RANK and step >= 2
        mean = loss.detach().clone()
        dist.all_reduce(mean.as_subclass(SlowToSync) if slow_link else mean)
        loss.backward()
        for p in [] if ddp else model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad.as_subclass(SlowToSync) if slow_link else p.grad)
        opt.step()
        print(f"step={step} rank={RANK} loss={float(mean) / dist.get_world_size():.4f}", flush=True)
    if RANK == 0:
        print(
            f"timing rank=0 steps={steps} skip={skip} "
            f"seconds_per_step={(time.perf_counter() - started) / max(1, steps - skip):.6f}",
            flush=True,
        )
    print(f"vigil-in-job={'vigil' in sys.modules}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # As examples/ddp_train.py: leave without finalization (pytorch/pytorch#179291), after
    # the exit handlers (the SDK recorder's last flush).
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(0)
