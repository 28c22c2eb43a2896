"""A torch.distributed (gloo) rank that never imports vigil, for the Flight Recorder tests:
three all_reduce calls, then FR_FAULT on rank FR_FAULT_RANK instead of the fourth:
  sleep  the rank sleeps (hung in compute) while the others wait in all_reduce #4
  skip   the rank skips all_reduce #4 and waits in a barrier (a desync)
  subgroup  the rank waits in a broadcast on a two-rank subgroup from a peer that never
         sends (it goes on to all_reduce #4 of the default group and waits there)
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
    fault, fault_rank = os.environ.get("FR_FAULT", ""), int(os.environ.get("FR_FAULT_RANK", "1"))
    peer = (fault_rank + 1) % dist.get_world_size()
    side = dist.new_group(ranks=sorted({fault_rank, peer})) if fault == "subgroup" else None
    t = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == fault_rank and fault == "subgroup":
        print(f"rank {rank} waits in a subgroup broadcast from rank {peer}", flush=True)
        dist.broadcast(torch.zeros(1), src=peer, group=side)
    if rank == fault_rank and fault == "sleep":
        print(f"rank {rank} hangs in compute", flush=True)
        while True:
            time.sleep(1)
    if rank == fault_rank and fault == "skip":
        print(f"rank {rank} skips all_reduce #4", flush=True)
        dist.barrier()
    dist.all_reduce(t)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
