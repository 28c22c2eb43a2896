"""The built-in catalog of failure signatures of distributed training (SPEC section 4).

Data only: what a failed instance's log tail or its backend's reason looks like when a
known failure happened, whether a retry can help, and what to tell the user in plain
language. `monitoring.classify` decides which entry applies.

Rules for entries (they keep matching linear in the size of the log):
- every log pattern starts with a literal or with `^` under MULTILINE, and every
  repetition is bounded or excludes newlines, so no pattern backtracks across lines;
- `specific=False` marks a generic signature (an uncaught Python exception of any class):
  any specific signature found anywhere in the tail beats it, so a RuntimeError that wraps
  "Connection reset by peer" is the communication error, not a user bug;
- `cascade_like=True` marks a symptom that healthy ranks show when another rank died
  (a peer closed the connection, the collective timed out waiting for it); the root-cause
  picker prefers other instances' errors over these;
- among entries that match on the same line, the earlier entry in the catalog wins, so
  narrower entries come before broader ones.
`documented` names where the text comes from (NCCL, PyTorch, Gloo, Linux, CUDA sources
or docs), so a reviewer can check the signature against its origin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Signature", "LOG_SIGNATURES", "BACKEND_SIGNATURES", "SIGNATURES", "signature"]


@dataclass(frozen=True)
class Signature:
    rule: str                 # stable id, counted by --max-num-of-same-error and node reputation
    pattern: re.Pattern[str]  # searched in the log tail (or full-matched against a backend reason)
    retryable: bool
    error_code: str
    message: str              # one line; may use the pattern's named groups, e.g. {exc}
    cause: str                # plain language: what happened
    next_step: str            # plain language: what the user should do
    cascade_like: bool = False
    specific: bool = True
    documented: str = ""
    # Whether this can explain a process killed from outside (SIGKILL, SIGTERM, SIGINT,
    # SIGHUP). None: only retryable signatures can; a user bug ends a program with an
    # exit code, so a start-up "Permission denied" warning must not explain a SIGKILL.
    explains_kill: bool | None = None

    @property
    def can_explain_kill(self) -> bool:
        return self.retryable if self.explains_kill is None else self.explains_kill


# Optional per-line prefixes that launchers add before an exception line:
# "[rank1]: ", "[2024-10-21 20:59:33] ", "[default0]:". Bounded, so linear.
_PREFIX = r"(?:\[[^\]\n]{0,80}\]:?[ \t]*){0,4}"

_I = re.IGNORECASE
_M = re.MULTILINE


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# Plain-language texts shared by several entries (SPEC 4, after the serving FAQ).
_PEER_OR_NETWORK = (
    "Another instance of the job stopped answering or the network between the nodes failed, "
    "so this instance's communication with it broke."
)
_RETRY_COMM = (
    "The job is retried automatically. If it keeps happening, look for the instance that "
    "failed first (its error is the root cause) and check the network of its node."
)
_HARDWARE_NEXT = (
    "The job is retried automatically, preferably on another node. If the same node fails "
    "again, ask an administrator to check or isolate it."
)
_NAN_CAUSE = "The training diverged: the loss became NaN or infinite."
_NAN_NEXT = ("Lower the learning rate, check the input data for bad values, or enable gradient "
             "clipping, then resume from a checkpoint taken before the divergence.")
_FIX_CODE = "Fix the code or its input and submit the job again; a restart would fail the same way."


LOG_SIGNATURES: tuple[Signature, ...] = (
    # ---- NCCL ------------------------------------------------------------------------
    # NCCL src/init.cc ncclGetErrorString(); PyTorch torch/csrc/distributed/c10d/NCCLUtils.hpp
    # getNcclErrorDetailStr() prints "NCCL error in: <file>:<line>, <string>, NCCL version x".
    Signature(
        rule="nccl-system-error",
        pattern=_re(r"unhandled system error|ncclSystemError"),
        retryable=True, error_code="NCCL_SYSTEM_ERROR",
        message="NCCL reported an unhandled system error",
        cause="NCCL, the GPU communication library, had a system call (socket, memory) fail; "
              "most often a peer instance exited or the network dropped.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="NCCL src/init.cc ncclGetErrorString(ncclSystemError); torch NCCLUtils.hpp getNcclErrorDetailStr",
    ),
    Signature(
        rule="nccl-remote-error",
        pattern=_re(r"remote process exited or there was a network error|ncclRemoteError"),
        retryable=True, error_code="NCCL_REMOTE_ERROR",
        message="NCCL: a remote process exited or there was a network error",
        cause=_PEER_OR_NETWORK, next_step=_RETRY_COMM, cascade_like=True,
        documented="NCCL src/init.cc ncclGetErrorString(ncclRemoteError), NCCL >= 2.13",
    ),
    Signature(
        rule="nccl-internal-error",
        pattern=_re(r"ncclInternalError|internal error - please report this issue to the NCCL developers"
                    r"|NCCL error in:[^\n]{0,400}?, internal error"),
        retryable=True, error_code="NCCL_INTERNAL_ERROR",
        message="NCCL reported an internal error",
        cause="An internal check of NCCL failed, usually because of a flaky network card or "
              "an inconsistent state after a peer failed.",
        next_step=_RETRY_COMM,
        documented="NCCL src/init.cc ncclGetErrorString(ncclInternalError)",
    ),
    Signature(
        rule="nccl-cuda-error",
        pattern=_re(r"unhandled cuda error|ncclUnhandledCudaError"),
        retryable=True, error_code="NCCL_CUDA_ERROR",
        message="NCCL reported an unhandled CUDA error",
        cause="A CUDA call inside NCCL failed, which usually points at the GPU or its driver.",
        next_step=_HARDWARE_NEXT,
        documented="NCCL src/init.cc ncclGetErrorString(ncclUnhandledCudaError)",
    ),
    Signature(
        rule="nccl-invalid-usage",
        pattern=_re(r"ncclInvalidUsage|NCCL error in:[^\n]{0,400}?, invalid usage"),
        retryable=False, error_code="NCCL_INVALID_USAGE",
        message="NCCL reported invalid usage",
        cause="The program used NCCL incorrectly, e.g. two ranks on the same GPU or "
              "mismatched collective calls across ranks.",
        next_step="Check the device each rank uses (LOCAL_RANK) and that every rank calls the "
                  "same collectives in the same order, then submit the job again.",
        documented="NCCL src/init.cc ncclGetErrorString(ncclInvalidUsage)",
    ),
    Signature(
        rule="nccl-invalid-argument",
        pattern=_re(r"ncclInvalidArgument|NCCL error in:[^\n]{0,400}?, invalid argument"),
        retryable=False, error_code="NCCL_INVALID_ARGUMENT",
        message="NCCL reported an invalid argument",
        cause="The program passed an invalid value to NCCL (wrong tensor, device or size).",
        next_step=_FIX_CODE,
        documented="NCCL src/init.cc ncclGetErrorString(ncclInvalidArgument)",
    ),
    Signature(
        rule="nccl-watchdog-timeout",
        pattern=_re(r"Watchdog caught collective operation timeout"),
        retryable=True, error_code="NCCL_COLLECTIVE_TIMEOUT",
        message="NCCL watchdog: a collective operation timed out",
        cause="A collective operation (e.g. all-reduce) waited longer than the process group's "
              "timeout, because some rank never joined it: it died, hung or is far slower.",
        next_step=_RETRY_COMM + " Turn on hang detection with an interval below the timeout "
                  "to get stack snapshots before the watchdog fires.",
        cascade_like=True,
        documented="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp WorkNCCL::checkTimeout",
    ),
    Signature(
        rule="nccl-communicator-aborted",
        pattern=_re(r"NCCL communicator was aborted"),
        retryable=True, error_code="NCCL_COMM_ABORTED",
        message="The NCCL communicator was aborted",
        cause="The process group was torn down after an earlier error on this or another rank.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (\"NCCL communicator was aborted on rank\")",
    ),
    Signature(
        rule="nccl-heartbeat-timeout",
        pattern=_re(r"Heartbeat monitor timed out"),
        retryable=True, error_code="NCCL_HEARTBEAT_TIMEOUT",
        message="The NCCL heartbeat monitor timed out",
        cause="The process group's watchdog thread itself stopped making progress, usually "
              "because the GPU or a collective is stuck.",
        next_step=_HARDWARE_NEXT,
        documented="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp HeartbeatMonitor (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC)",
    ),
    Signature(
        rule="nccl-ib-completion-error",
        pattern=_re(r"NET/IB ?:[^\n]{0,200}?Got completion[^\n]{0,200}?(?:error|status)"),
        retryable=True, error_code="NCCL_IB_ERROR",
        message="NCCL InfiniBand transport reported a failed completion",
        cause="An InfiniBand/RoCE transfer failed (e.g. retry count exceeded), because a peer "
              "went away or a link is bad.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="NCCL src/transport/net_ib.cc ncclIbTest (\"NET/IB : Got completion from peer ... with error\")",
    ),
    # ---- Gloo ------------------------------------------------------------------------
    Signature(
        rule="gloo-connect-full-mesh-failed",
        pattern=_re(r"Gloo connectFullMesh failed"),
        retryable=True, error_code="GLOO_CONNECT_FAILED",
        message="Gloo could not connect all ranks to each other",
        cause="While the process group was being created, some rank could not reach the "
              "others (a peer was not up yet, died, or a stale address was used).",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (\"Gloo connectFullMesh failed with\")",
    ),
    Signature(
        rule="gloo-connection-closed",
        pattern=_re(r"Connection closed by (?:remote )?peer"),
        retryable=True, error_code="CONNECTION_CLOSED",
        message="The connection was closed by a peer",
        cause=_PEER_OR_NETWORK, next_step=_RETRY_COMM, cascade_like=True,
        documented="third_party/gloo/gloo/transport/tcp/pair.cc; NCCL src/misc/socket.cc (\"Connection closed by remote peer\")",
    ),
    Signature(
        rule="gloo-operation-timeout",
        pattern=_re(r"Timed out waiting \d{1,15}ms for (?:recv|send) operation to complete"),
        retryable=True, error_code="GLOO_TIMEOUT",
        message="Gloo timed out waiting for a peer's data",
        cause="A peer stopped sending or receiving during a collective: it died, hung or is slow.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="third_party/gloo/gloo/transport/tcp/unbound_buffer.cc waitRecv/waitSend",
    ),
    # ---- sockets (strerror texts of Linux errno) -----------------------------------
    Signature(
        rule="connection-reset",
        pattern=_re(r"Connection reset by peer"),
        retryable=True, error_code="ECONNRESET",
        message="The connection was reset by a peer",
        cause=_PEER_OR_NETWORK, next_step=_RETRY_COMM, cascade_like=True,
        documented="Linux errno ECONNRESET (104), strerror text",
    ),
    Signature(
        rule="connection-refused",
        pattern=_re(r"Connection refused"),
        retryable=True, error_code="ECONNREFUSED",
        message="A connection was refused",
        cause="Nothing was listening at the address this instance connected to: the master "
              "or a peer was not started yet or had already exited.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="Linux errno ECONNREFUSED (111), strerror text",
    ),
    Signature(
        rule="broken-pipe",
        pattern=_re(r"Broken pipe"),
        retryable=True, error_code="EPIPE",
        message="Broken pipe: the other end of a connection went away",
        cause=_PEER_OR_NETWORK, next_step=_RETRY_COMM, cascade_like=True,
        documented="Linux errno EPIPE (32), strerror text",
    ),
    Signature(
        rule="no-route-to-host",
        pattern=_re(r"No route to host"),
        retryable=True, error_code="EHOSTUNREACH",
        message="No route to host",
        cause="The network could not reach another node of the job.",
        next_step=_HARDWARE_NEXT,
        documented="Linux errno EHOSTUNREACH (113), strerror text",
    ),
    Signature(
        rule="connection-timed-out",
        pattern=_re(r"Connection timed out|connect\(\) timed out"),
        retryable=True, error_code="ETIMEDOUT",
        message="A network connection timed out",
        cause="Another node did not answer in time; the network or that node is in trouble.",
        next_step=_RETRY_COMM,
        documented="Linux errno ETIMEDOUT (110), strerror text; NCCL socket connect",
    ),
    Signature(
        rule="name-resolution-failed",
        pattern=_re(r"Temporary failure in name resolution"),
        retryable=True, error_code="EAI_AGAIN",
        message="Temporary failure in name resolution",
        cause="The DNS lookup of another node's name failed for the moment.",
        next_step=_RETRY_COMM,
        documented="glibc gai_strerror(EAI_AGAIN)",
    ),
    Signature(
        rule="address-in-use",
        pattern=_re(r"Address already in use|EADDRINUSE"),
        retryable=True, error_code="EADDRINUSE",
        message="The port is already in use",
        cause="The rendezvous port was still taken, e.g. by a process of an earlier attempt.",
        next_step="The job is retried with a fresh port. If you hard-code MASTER_PORT, let the "
                  "console choose it instead.",
        documented="Linux errno EADDRINUSE (98); torch/csrc/distributed/c10d/socket.cpp",
    ),
    # ---- store and rendezvous ------------------------------------------------------
    Signature(
        rule="store-socket-timeout",
        pattern=_re(r"Socket Timeout"),
        retryable=True, error_code="STORE_TIMEOUT",
        message="The distributed key-value store timed out",
        cause="An instance waited too long for the rendezvous store (TCPStore), usually because "
              "the master rank or a peer died or never started.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/csrc/distributed/c10d/TCPStore.cpp (DistStoreError \"Socket Timeout\")",
    ),
    Signature(
        rule="store-connect-timeout",
        pattern=_re(r"client socket has timed out after \d{1,15}"),
        retryable=True, error_code="STORE_CONNECT_TIMEOUT",
        message="Connecting to the rendezvous store timed out",
        cause="This instance could not reach the master's store in time: the master was not "
              "up, died, or the network failed.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/csrc/distributed/c10d/socket.cpp (\"The client socket has timed out after\")",
    ),
    Signature(
        rule="store-clients-timeout",
        pattern=_re(r"Timed out after \d{1,15} seconds waiting for clients"),
        retryable=True, error_code="STORE_CLIENTS_TIMEOUT",
        message="The rendezvous store timed out waiting for the other ranks",
        cause="The master waited for all ranks to join but some never arrived.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/distributed/rendezvous.py _create_c10d_store / TCPStore waitForWorkers",
    ),
    Signature(
        rule="rendezvous-timeout",
        pattern=_re(r"RendezvousTimeoutError"),
        retryable=True, error_code="RENDEZVOUS_TIMEOUT",
        message="Rendezvous timed out",
        cause="Not enough instances joined the rendezvous in time.",
        next_step="The job is retried. If it repeats, check that every instance starts and can "
                  "reach the master; an instance waiting a long time for resources also causes this.",
        documented="torch/distributed/elastic/rendezvous/api.py RendezvousTimeoutError",
    ),
    Signature(
        rule="rendezvous-closed",
        pattern=_re(r"RendezvousClosedError"),
        retryable=True, error_code="RENDEZVOUS_CLOSED",
        message="The rendezvous was closed",
        cause="The rendezvous was shut down because another agent of the job finished or failed.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/distributed/elastic/rendezvous/api.py RendezvousClosedError",
    ),
    Signature(
        rule="rendezvous-connection",
        pattern=_re(r"RendezvousConnectionError"),
        retryable=True, error_code="RENDEZVOUS_CONNECTION",
        message="The connection to the rendezvous backend failed",
        cause="The instance could not reach the rendezvous store on the master.",
        next_step=_RETRY_COMM, cascade_like=True,
        documented="torch/distributed/elastic/rendezvous/api.py RendezvousConnectionError",
    ),
    # ---- GPU hardware and CUDA -----------------------------------------------------
    Signature(
        rule="cuda-ecc-error",
        pattern=_re(r"uncorrectable ECC error|cudaErrorECCUncorrectable", _I),
        retryable=True, error_code="GPU_ECC_ERROR",
        message="The GPU reported an uncorrectable ECC memory error",
        cause="The GPU's memory has a hardware fault.",
        next_step=_HARDWARE_NEXT,
        documented="CUDA runtime cudaErrorECCUncorrectable (\"uncorrectable ECC error encountered\")",
    ),
    Signature(
        rule="gpu-xid",
        pattern=_re(r"NVRM: Xid \([^)\n]{0,60}\): (?P<xid>\d{1,4})"),
        retryable=True, error_code="GPU_XID",
        message="The NVIDIA driver reported Xid {xid}",
        cause="The NVIDIA driver reported a GPU fault (an Xid error).",
        next_step=_HARDWARE_NEXT,
        documented="NVIDIA Xid errors, docs.nvidia.com/deploy/xid-errors (kernel log \"NVRM: Xid\")",
    ),
    Signature(
        rule="gpu-fallen-off-bus",
        pattern=_re(r"GPU has fallen off the bus"),
        retryable=True, error_code="GPU_LOST",
        message="A GPU has fallen off the bus",
        cause="A GPU stopped responding to the host (hardware or power problem; Xid 79).",
        next_step=_HARDWARE_NEXT,
        documented="NVIDIA Xid 79, docs.nvidia.com/deploy/xid-errors",
    ),
    Signature(
        rule="cuda-launch-failure",
        pattern=_re(r"unspecified launch failure|cudaErrorLaunchFailure"),
        retryable=True, error_code="CUDA_LAUNCH_FAILURE",
        message="CUDA: unspecified launch failure",
        cause="A GPU kernel failed for a reason CUDA could not name; it often comes with a GPU "
              "fault (Xid 13/31/43) on the node.",
        next_step=_HARDWARE_NEXT,
        documented="CUDA runtime cudaErrorLaunchFailure (\"unspecified launch failure\")",
    ),
    # Decision: an illegal memory access is treated as a bug (not retryable). In training it
    # is most often an index out of range or a faulty custom kernel, which repeats at the
    # same step on every attempt; a user who sees it as a hardware fault can add
    # "illegal memory access" as a retryable keyword.
    Signature(
        rule="cuda-illegal-memory-access",
        pattern=_re(r"an illegal memory access was encountered|cudaErrorIllegalAddress"),
        retryable=False, error_code="CUDA_ILLEGAL_ADDRESS",
        message="CUDA: an illegal memory access was encountered",
        cause="A GPU kernel read or wrote memory outside its buffers, usually an index out of "
              "range or a bug in a custom kernel.",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 to find the operation and fix it. If it only "
                  "ever happens on one node, treat it as hardware and add \"illegal memory access\" "
                  "as a retryable keyword.",
        documented="CUDA runtime cudaErrorIllegalAddress (\"an illegal memory access was encountered\")",
    ),
    Signature(
        rule="cuda-device-assert",
        pattern=_re(r"device-side assert triggered"),
        retryable=False, error_code="CUDA_DEVICE_ASSERT",
        message="CUDA: device-side assert triggered",
        cause="A check inside a GPU kernel failed, usually a label or index outside the "
              "valid range (e.g. a class id >= the number of classes).",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 (or on CPU) to see which check failed, fix "
                  "the data or code, and submit the job again.",
        documented="CUDA runtime cudaErrorAssert (\"device-side assert triggered\")",
    ),
    Signature(
        rule="cuda-no-device",
        pattern=_re(r"no CUDA-capable device is detected|cudaErrorNoDevice"),
        retryable=True, error_code="CUDA_NO_DEVICE",
        message="No CUDA-capable device was detected",
        cause="The instance started without a usable GPU: the node's driver or device plugin "
              "failed to give it one.",
        next_step=_HARDWARE_NEXT,
        documented="CUDA runtime cudaErrorNoDevice (\"no CUDA-capable device is detected\")",
    ),
    Signature(
        rule="cuda-driver-too-old",
        pattern=_re(r"CUDA driver version is insufficient for CUDA runtime version"),
        retryable=False, error_code="CUDA_DRIVER_INSUFFICIENT",
        message="The CUDA driver is older than the CUDA runtime in the image",
        cause="The image was built for a newer CUDA than the node's driver supports.",
        next_step="Use an image built for the node's CUDA version, or ask for nodes with a newer driver.",
        documented="CUDA runtime cudaErrorInsufficientDriver",
    ),
    # ---- memory --------------------------------------------------------------------
    Signature(
        rule="cuda-out-of-memory",
        pattern=_re(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"),
        retryable=False, error_code="CUDA_OOM",
        message="CUDA out of memory",
        cause="The program needed more GPU memory than the GPU has.",
        next_step="Lower the batch size or sequence length, or use activation checkpointing or more "
                  "GPUs, then submit the job again; a restart would run out of memory the same way.",
        documented="torch/csrc/cuda/ (torch.OutOfMemoryError \"CUDA out of memory. Tried to allocate\")",
    ),
    # Decision: only explicit OOM-killer evidence counts as an out-of-memory kill. A bare
    # "Killed" (what a shell prints for any SIGKILL) does not: preemption and people send
    # SIGKILL too, and those are retryable.
    Signature(
        rule="oom-killed",
        pattern=_re(r"Out of memory: Kill(?:ed)? process|Memory cgroup out of memory|invoked oom-killer"
                    r"|oom[-_]kill event|OOM Killed|OOMKilled", _I),
        retryable=False, error_code="OOM_KILLED",
        message="Killed for running out of memory",
        cause="The system killed the instance because it ran out of memory (the OOM killer).",
        next_step="Raise the memory of the instance (resource_config.memory) and submit the job again.",
        explains_kill=True,
        documented="Linux mm/oom_kill.c (\"Out of memory: Killed process\"); slurmstepd (\"Detected 1 oom_kill event\")",
    ),
    Signature(
        rule="python-memory-error",
        pattern=_re(r"(?m)^" + _PREFIX + r"MemoryError(?::|[ \t]*$)"),
        retryable=False, error_code="HOST_OOM",
        message="Python raised MemoryError",
        cause="The program ran out of host memory.",
        next_step="Raise the memory of the instance (resource_config.memory) or load less data at once.",
        documented="Python built-in exception MemoryError",
    ),
    Signature(
        rule="shared-memory-exhausted",
        pattern=_re(r"insufficient shared memory \(shm\)"),
        retryable=False, error_code="SHM_EXHAUSTED",
        message="A DataLoader worker ran out of shared memory",
        cause="The data-loading workers exchange batches through shared memory (/dev/shm), and it is too small.",
        next_step="Give the instance more shared memory, or use fewer DataLoader workers "
                  "(num_workers), then submit the job again.",
        documented="torch/utils/data/_utils/signal_handling.py / worker.py (\"insufficient shared memory (shm)\")",
    ),
    Signature(
        rule="dataloader-worker-killed",
        pattern=_re(r"DataLoader worker \(pid[^\n]{0,60}?\) (?:is killed by signal|exited unexpectedly)"),
        retryable=False, error_code="DATALOADER_WORKER_KILLED",
        message="A DataLoader worker process was killed",
        cause="A data-loading worker process was killed, most often because the machine ran out of memory.",
        next_step="Raise the memory of the instance or use fewer DataLoader workers, then submit the job again.",
        explains_kill=True,
        documented="torch/utils/data/dataloader.py (\"DataLoader worker (pid(s) ...) exited unexpectedly\")",
    ),
    # ---- node loss and preemption --------------------------------------------------
    Signature(
        rule="node-failure",
        pattern=_re(r"CANCELLED AT [^\n]{0,40}?DUE TO NODE FAIL"),
        retryable=True, error_code="NODE_LOST",
        message="The node failed",
        cause="The node running the instance failed or lost contact with the scheduler.",
        next_step=_HARDWARE_NEXT,
        documented="Slurm slurmstepd (\"*** STEP ... CANCELLED AT ... DUE TO NODE FAILURE ***\")",
    ),
    Signature(
        rule="preempted",
        pattern=_re(r"CANCELLED AT [^\n]{0,40}?DUE TO PREEMPTION"),
        retryable=True, error_code="PREEMPTED",
        message="The instance was preempted",
        cause="The scheduler took the resources back for other work.",
        next_step="The job is retried automatically when resources are free again.",
        documented="Slurm slurmstepd (\"*** JOB ... CANCELLED AT ... DUE TO PREEMPTION ***\")",
    ),
    Signature(
        rule="launcher-received-signal",
        pattern=_re(r"SignalException: Process \d{1,10} got signal: (?P<signum>\d{1,3})"),
        retryable=True, error_code="LAUNCHER_SIGNAL",
        message="The launcher received signal {signum} and stopped its workers",
        cause="Something outside the program (the scheduler, the node, a person) told the "
              "launcher to stop.",
        next_step="The job is retried automatically; if a person stopped it on purpose, stop the job in the console instead.",
        cascade_like=True,
        documented="torch/distributed/elastic/multiprocessing/api.py SignalException",
    ),
    Signature(
        rule="worker-killed-by-signal",
        pattern=_re(r"Signal (?P<signum>\d{1,3}) \((?P<signame>SIG[A-Z]{2,8})\) received by PID"),
        retryable=True, error_code="WORKER_SIGNAL",
        message="A worker process was killed by {signame}",
        cause="A worker process was killed by a signal, without an error of its own in the log.",
        next_step="The job is retried automatically; if it repeats on the same node, check that node.",
        documented="torch/distributed/elastic/multiprocessing/api.py (\"Signal %s (%s) received by PID %s\")",
    ),
    # ---- the program itself: not retryable ----------------------------------------
    Signature(
        rule="python-import-error",
        pattern=_re(r"(?m)^" + _PREFIX + r"(?P<exc>ModuleNotFoundError|ImportError): (?P<detail>[^\n]{0,200})"),
        retryable=False, error_code="IMPORT_ERROR",
        message="{exc}: {detail}",
        cause="A Python module or name the program imports is missing from the image or environment.",
        next_step="Install the missing package in the image or environment (or fix the import), "
                  "then submit the job again.",
        documented="Python built-in exceptions ImportError, ModuleNotFoundError",
    ),
    Signature(
        rule="python-syntax-error",
        pattern=_re(r"(?m)^" + _PREFIX + r"(?P<exc>SyntaxError|IndentationError|TabError): (?P<detail>[^\n]{0,200})"),
        retryable=False, error_code="SYNTAX_ERROR",
        message="{exc}: {detail}",
        cause="The program's code has a syntax error, so Python could not run it.",
        next_step=_FIX_CODE,
        documented="Python built-in exceptions SyntaxError, IndentationError, TabError",
    ),
    Signature(
        rule="file-not-found",
        pattern=_re(r"FileNotFoundError|No such file or directory|can't open file"),
        retryable=False, error_code="FILE_NOT_FOUND",
        message="A file the program needs was not found",
        cause="A file or directory the program reads (script, data, checkpoint) does not exist "
              "on the instance.",
        next_step="Check the path in the command and settings and that the storage holding it is "
                  "mounted, then submit the job again.",
        documented="Linux errno ENOENT (2), strerror text; Python FileNotFoundError",
    ),
    Signature(
        rule="command-not-found",
        pattern=_re(r"command not found|sh: (?:line )?\d{1,6}: [^\n]{0,300}?: not found"),
        retryable=False, error_code="COMMAND_NOT_FOUND",
        message="The command was not found",
        cause="The command to run does not exist on the instance (exit code 127).",
        next_step="Check the spelling of the command and that the program is installed in the "
                  "image or on PATH, then submit the job again.",
        documented="bash/dash (\"command not found\", \"sh: 1: x: not found\"), POSIX exit status 127",
    ),
    Signature(
        rule="exec-format-error",
        pattern=_re(r"exec format error", _I),
        retryable=False, error_code="EXEC_FORMAT_ERROR",
        message="exec format error: the program cannot run on this CPU",
        cause="The program or image was built for another CPU architecture (e.g. arm64 on an "
              "x86-64 node).",
        next_step="Use an image or binary built for the node's CPU, or choose other resources.",
        documented="Linux errno ENOEXEC (8) \"Exec format error\"; PAI-EAS FAQ \"fork/exec /bin/sh: exec format error\"",
    ),
    Signature(
        rule="permission-denied",
        pattern=_re(r"Permission denied"),
        retryable=False, error_code="PERMISSION_DENIED",
        message="Permission denied",
        cause="The program lacks permission to run a file or to read or write a path (exit code "
              "126 when the command itself is not executable).",
        next_step="Make the script executable (chmod +x) or run it through its interpreter, and "
                  "check the permissions of the paths it uses.",
        documented="Linux errno EACCES (13), strerror text; POSIX exit status 126",
    ),
    # Decision: a full disk is not retryable: the files that filled it are written again
    # by the next attempt, as in the FAQ's example of model files filling the system disk.
    Signature(
        rule="disk-full",
        pattern=_re(r"No space left on device|StorageFull"),
        retryable=False, error_code="ENOSPC",
        message="Disk full: No space left on device",
        cause="The instance's disk is full, e.g. too many model files or checkpoints.",
        next_step="Enlarge the disk, clean up old checkpoints, or keep large files on mounted "
                  "external storage, then submit the job again.",
        documented="Linux errno ENOSPC (28), strerror text; PAI-EAS FAQ IoError StorageFull",
    ),
    Signature(
        rule="loss-is-nan",
        pattern=_re(r"Loss became infinite or NaN|Minimum loss scale reached", _I),
        retryable=False, error_code="LOSS_NAN",
        message="The training loss became NaN or infinite",
        cause=_NAN_CAUSE, next_step=_NAN_NEXT,
        documented="detectron2 FloatingPointError \"Loss became infinite or NaN\"; fairseq \"Minimum loss scale reached\"",
    ),
    # "loss" (not the end of a longer word), then up to 40 characters without "=" or ":" (so
    # the value is the loss's own, not a later field's), then "=", ":", "is" or "became" and
    # nan/inf. The lookbehind comes after the literal so the scan can jump from one "loss" to
    # the next instead of trying the pattern at every position of a long progress log.
    Signature(
        rule="loss-value-nan",
        pattern=_re(r"loss(?<![a-z]loss)[^\n=:]{0,40}(?:[=:]|\bis\b|\bbecame\b)[ \t]*(?:nan|inf)\b", _I),
        retryable=False, error_code="LOSS_NAN",
        message="The training loss became NaN or infinite",
        cause=_NAN_CAUSE, next_step=_NAN_NEXT,
        documented="training loops' progress lines (\"loss: nan\", \"loss = inf\", \"Loss is nan, stopping training\")",
    ),
    # ---- generic: an uncaught Python exception in user code ------------------------
    # Any specific entry found anywhere in the tail wins over this one.
    Signature(
        rule="python-exception",
        pattern=_re(
            r"(?m)^" + _PREFIX
            + r"(?P<exc>(?:[A-Za-z_]\w{0,60}\.){0,8}(?!ChildFailedError\b)[A-Z]\w{0,80}?(?:Error|Exception))"
            + r"(?::[ \t]*(?P<detail>[^\n]{0,200})|[ \t]*$)"
        ),
        retryable=False, error_code="PYTHON_EXCEPTION",
        message="{exc}: {detail}",
        cause="The program raised an exception that it did not handle (a bug or bad input in the training code).",
        next_step=_FIX_CODE + " The instance log shows the traceback.",
        specific=False,
        documented="Python traceback format (Lib/traceback.py): the last line names the exception",
    ),
)


# Backend reasons (Kubernetes container/pod reasons, Slurm job states) that decide a
# classification on their own. Full-matched, case-insensitive, against the reason.
BACKEND_SIGNATURES: tuple[Signature, ...] = (
    Signature(
        rule="oom-killed",
        pattern=_re(r"OOMKilled|OUT_OF_MEMORY|OutOfMemory", _I),
        retryable=False, error_code="OOM_KILLED",
        message="Killed for running out of memory",
        cause="The system killed the instance because it ran out of memory.",
        next_step="Raise the memory of the instance (resource_config.memory) and submit the job again.",
        documented="Kubernetes container state reason OOMKilled; Slurm job state OUT_OF_MEMORY",
    ),
    Signature(
        rule="image-pull-failed",
        pattern=_re(r"ImagePullBackOff|ErrImagePull|InvalidImageName|ErrImageNeverPull", _I),
        retryable=False, error_code="IMAGE_PULL_FAILED",
        message="The image could not be pulled",
        cause="The container image could not be downloaded: a wrong image name or tag, a "
              "registry that needs a username and password, or one not reachable from the node.",
        next_step="Check the image address and tag, use a registry address reachable from the "
                  "cluster (internal address in the same region), and give registry credentials "
                  "if it does not allow anonymous pulls.",
        documented="Kubernetes container waiting reasons ImagePullBackOff, ErrImagePull; PAI-EAS FAQ",
    ),
    Signature(
        rule="preempted",
        pattern=_re(r"Preempted|Preempting|PREEMPTED|Evicted", _I),
        retryable=True, error_code="PREEMPTED",
        message="The instance was preempted or evicted",
        cause="The scheduler took the resources back for other work, or evicted the instance "
              "because the node ran short of resources.",
        next_step="The job is retried automatically when resources are free again.",
        documented="Kubernetes pod reasons Evicted, Preempting; Slurm job state PREEMPTED",
    ),
    Signature(
        rule="node-lost",
        pattern=_re(r"NodeLost|NODE_FAIL|NodeShutdown|Shutdown|Lost", _I),
        retryable=True, error_code="NODE_LOST",
        message="The node running the instance was lost",
        cause="The node running the instance failed, shut down or lost contact.",
        next_step=_HARDWARE_NEXT,
        documented="Kubernetes pod reasons NodeLost, NodeShutdown; Slurm job state NODE_FAIL",
    ),
    Signature(
        rule="waiting-for-resources",
        pattern=_re(r"Unschedulable|FailedScheduling|Resources|Insufficient[A-Za-z]{0,20}", _I),
        retryable=True, error_code="UNSCHEDULABLE",
        message="The instance waited a long time for resources",
        cause="No node had the resources the instance asks for (GPUs, CPU, memory), so it "
              "waited a long time and was not started.",
        next_step="Ask for fewer resources per instance, wait for other jobs to finish, or check "
                  "in the node list that enough nodes are schedulable.",
        documented="Kubernetes pod condition PodScheduled=False reason Unschedulable; Slurm pending reason Resources",
    ),
)

SIGNATURES: tuple[Signature, ...] = LOG_SIGNATURES + BACKEND_SIGNATURES


def signature(rule: str) -> Signature:
    """The log signature with this rule id (the backend one if no log signature has it)."""
    for sig in SIGNATURES:
        if sig.rule == rule:
            return sig
    raise KeyError(f"no catalog signature with rule {rule!r}")
