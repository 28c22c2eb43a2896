"""One rank of a 2-process gloo job with Vigil's C4D instrumentation on
(VIGIL_C4D=1): Monitor(PyTorchConfig) instruments torch.distributed itself.
VIGIL_TEST_STALL_RANK stalls that rank before its third collective, so the
other rank sits inside it (entered, not exited) meanwhile."""

import os
import time

import torch
import torch.distributed as dist

from vigil import job_monitor as jm

monitor = jm.Monitor(config=jm.PyTorchConfig())
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
t = torch.ones(4) * (rank + 1)
dist.all_reduce(t)  # seq 1
dist.broadcast(t, src=0)  # seq 2
if rank == int(os.environ.get("VIGIL_TEST_STALL_RANK", "-1")):
    time.sleep(float(os.environ.get("VIGIL_TEST_STALL_SECONDS", "0")))
dist.all_reduce(t)  # seq 3
work = dist.all_reduce(t, async_op=True)  # seq 4, exit when the work completes
work.wait()
dist.barrier()  # seq 5
assert t[0].item() == 12.0, t
dist.destroy_process_group()
