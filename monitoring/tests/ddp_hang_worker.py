"""A DDP training loop (CPU, gloo) that never imports vigil, with one rank going wrong in
a way real training code does: the waiting ranks sit in `loss.backward()`, where DDP's
gradient all-reduce runs in C++ and no torch.distributed frame shows in Python.

Per step: forward, backward (DDP's all-reduce), optimizer step, a "step=N rank=R" line;
with HANG_MODE=comm the loss is all_reduce'd for logging too, before backward. HANG_STEPS steps (default 400), then
a barrier, and exit 0. Rank HANG_RANK, at step HANG_STEP:
  HANG_MODE=compute  hangs in its own code (compute_forever) before the step's forward
  HANG_MODE=skip     skips the step's backward, as a loop skipping a bad batch on one rank
                     does: from then on its all-reduces pair with its peers' previous ones
                     (gloo checks sizes only, and every one is DDP's), until it waits in
                     the final barrier where its peers wait in DDP's last all-reduce. (With
                     a logging all_reduce too the sizes would differ and gloo would
                     abort: "Received data size doesn't match expected size".)
  HANG_MODE=comm     its loss all_reduce never returns, after the data moved (its
                     tensor's __torch_function__, which all_reduce dispatches to, waits after
                     the real collective): its peers finished that collective and wait in
                     the next one, DDP's, inside backward
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

MODE = os.environ.get("HANG_MODE", "")
HANG_RANK = int(os.environ.get("HANG_RANK", "1"))
HANG_STEP = int(os.environ.get("HANG_STEP", "4"))


def compute_forever() -> None:
    while True:
        time.sleep(0.5)


class NeverReturns(torch.Tensor):
    """A tensor whose all_reduce does not return on this rank once its data has moved."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is dist.distributed_c10d.all_reduce:
            func(args[0].as_subclass(torch.Tensor), *args[1:], **(kwargs or {}))
            compute_forever()
        return super().__torch_function__(func, types, args, kwargs)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, int(os.environ.get("HANG_STEPS", "400")) + 1):
        faulty = rank == HANG_RANK and step == HANG_STEP
        if faulty and MODE == "compute":
            compute_forever()
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        logged = loss.detach().clone()
        if MODE == "comm":
            dist.all_reduce(logged.as_subclass(NeverReturns) if faulty and MODE == "comm" else logged)
        if faulty and MODE == "skip":
            print(f"step={step} rank={rank} skipped", flush=True)
            continue
        loss.backward()
        opt.step()
        print(f"step={step} rank={rank} loss={float(logged):.4f}", flush=True)
        time.sleep(0.02)
    print(f"vigil-in-job={'vigil' in sys.modules}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
