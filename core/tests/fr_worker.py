"""A torch.distributed (gloo) rank that never imports vigil, for the Flight Recorder tests:
three all_reduce calls, then FR_FAULT on rank FR_FAULT_RANK instead of the fourth:
  sleep  the rank sleeps (hung in compute) while the others wait in all_reduce #4
  skip   the rank skips all_reduce #4 and waits in a barrier (a desync)
The dumps come from Vigil's start-up hook (jobs/backends/fr_boot.py, on PYTHONPATH as
sitecustomize) and, with FR_PICKLE_DIR set, also in torch's pickle form from a thread
here, the form NCCL's watchdog writes on timeout."""

import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def pickle_dumps(directory: str, rank: int) -> None:
    # torch's own API (its type stubs do not list it)
    from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]
    path = os.path.join(directory, f"nccl_trace_rank_{rank}")
    while True:
        data = _dump_fr_trace()
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        time.sleep(0.2)


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    if os.environ.get("FR_PICKLE_DIR"):
        threading.Thread(target=pickle_dumps, args=(os.environ["FR_PICKLE_DIR"], rank), daemon=True).start()
    t = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(t)
    fault = os.environ.get("FR_FAULT", "")
    if rank == int(os.environ.get("FR_FAULT_RANK", "1")) and fault == "sleep":
        print(f"rank {rank} hangs in compute", flush=True)
        while True:
            time.sleep(1)
    if rank == int(os.environ.get("FR_FAULT_RANK", "1")) and fault == "skip":
        print(f"rank {rank} skips all_reduce #4", flush=True)
        dist.barrier()
    dist.all_reduce(t)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
