"""The built-in catalog of failure signatures of distributed training (SPEC section 4).

Data only: what a failed instance's log tail or its backend's reason looks like when a
known failure happened, whether a retry can help, and what to tell the user in plain
language. `core.classify` decides which entry applies.

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
or docs, or the entries of the real-world corpus `monitoring/corpus/` it was written from,
as "corpus <family>-NNN"), so a reviewer can check the signature against its origin; a
comment above an entry says why its verdict is what it is where that is a decision.
Every entry names its failure `family` (the corpus's families), shown with the verdict.
Entries grown from the corpus were written from its training part only: the held-back
30 % (`monitoring/corpus/split.py`) measures how well they generalise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Signature", "LOG_SIGNATURES", "BACKEND_SIGNATURES", "SIGNATURES", "signature"]


@dataclass(frozen=True)
class Signature:
    rule: str  # stable id, counted by --max-num-of-same-error and node reputation
    family: str  # the corpus family it belongs to (monitoring/corpus, issue 13)
    pattern: re.Pattern[str]  # searched in the log tail (or full-matched against a backend reason)
    retryable: bool
    error_code: str
    message: str  # one line; may use the pattern's named groups, e.g. {exc}
    cause: str  # plain language: what happened
    next_step: str  # plain language: what the user should do
    cascade_like: bool = False
    specific: bool = True
    documented: str = ""
    # Whether this can explain a process killed from outside (SIGKILL, SIGTERM, SIGINT,
    # SIGHUP). None: only retryable signatures can; a user bug ends a program with an
    # exit code, so a start-up "Permission denied" warning must not explain a SIGKILL.
    explains_kill: bool | None = None
    # Whether a retryable entry can explain a crash by SIGSEGV, SIGBUS, SIGILL or SIGFPE.
    # None: only hardware/driver faults and lost nodes can (families gpu and preemption);
    # a stale network warning does not make a segfault retryable. Not-retryable entries
    # always can (a version mismatch explains a segfault).
    explains_crash: bool | None = None
    # A retryable verdict that holds this many times per (rule, role, index), then not
    # (None: no limit of its own; --max-num-of-same-error still applies).
    retry_limit: int | None = None
    # Backend reasons only: log families whose specific signatures, when the log holds
    # one, say more than the reason (ImagePullBackOff from a rate limit vs a missing tag).
    refined_by: tuple[str, ...] = ()

    @property
    def can_explain_kill(self) -> bool:
        return self.retryable if self.explains_kill is None else self.explains_kill

    @property
    def can_explain_crash(self) -> bool:
        if self.explains_crash is not None:
            return self.explains_crash
        return not self.retryable or self.family in ("gpu", "preemption")


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
_TIME_LIMIT_NEXT = (
    "Ask for a longer time limit (or a queue/QoS that allows one), or checkpoint more "
    "often and resume, then submit the job again."
)
_CANCELLED_NEXT = (
    "Submit the job again if the cancellation was a mistake; stop jobs from the "
    "console so the monitor knows the stop was meant."
)
_CONFIG_ERROR_CAUSE = (
    "The container could not be created because a Secret, ConfigMap or key it refers to does not exist."
)
_CONFIG_ERROR_NEXT = (
    "Create the missing Secret/ConfigMap (or fix its name or key) before the job starts, then submit the job again."
)
_COLLECTIVE_TIMEOUT_CAUSE = (
    "A collective operation (e.g. all-reduce) waited longer than the process group's timeout "
    "because some rank never joined it. With no other error in the log this is most often the "
    "program itself: ranks that call different collectives (a desync), or one rank doing long "
    "work alone (evaluation, preprocessing, saving a checkpoint) while the others wait, which a "
    "restart repeats."
)
_COLLECTIVE_TIMEOUT_NEXT = (
    "Make every rank call the same collectives, or raise the process group's timeout around work "
    "that only one rank does. If this was a one-off network or storage stall, add this line as a "
    "retryable keyword. Hang detection with an interval below the timeout takes stack snapshots "
    "before the watchdog fires."
)
_NAN_CAUSE = "The training diverged: the loss became NaN or infinite."
_NAN_NEXT = (
    "Lower the learning rate, check the input data for bad values, or enable gradient "
    "clipping, then resume from a checkpoint taken before the divergence."
)
_FIX_CODE = "Fix the code or its input and submit the job again; a restart would fail the same way."


LOG_SIGNATURES: tuple[Signature, ...] = (
    # ---- NCCL ------------------------------------------------------------------------
    # NCCL src/init.cc ncclGetErrorString(); PyTorch torch/csrc/distributed/c10d/NCCLUtils.hpp
    # getNcclErrorDetailStr() prints "NCCL error in: <file>:<line>, <string>, NCCL version x".
    Signature(
        rule="nccl-system-error",
        family="network",
        pattern=_re(r"unhandled system error|ncclSystemError"),
        retryable=True,
        error_code="NCCL_SYSTEM_ERROR",
        message="NCCL reported an unhandled system error",
        cause="NCCL, the GPU communication library, had a system call (socket, memory) fail; "
        "most often a peer instance exited or the network dropped.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="NCCL src/init.cc ncclGetErrorString(ncclSystemError); torch NCCLUtils.hpp getNcclErrorDetailStr",
    ),
    Signature(
        rule="nccl-remote-error",
        family="network",
        pattern=_re(r"remote process exited or there was a network error|ncclRemoteError"),
        retryable=True,
        error_code="NCCL_REMOTE_ERROR",
        message="NCCL: a remote process exited or there was a network error",
        cause=_PEER_OR_NETWORK,
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="NCCL src/init.cc ncclGetErrorString(ncclRemoteError), NCCL >= 2.13",
    ),
    Signature(
        rule="nccl-internal-error",
        family="network",
        pattern=_re(
            r"ncclInternalError|internal error - please report this issue to the NCCL developers"
            r"|NCCL error in:[^\n]{0,400}?, internal error"
        ),
        retryable=True,
        error_code="NCCL_INTERNAL_ERROR",
        message="NCCL reported an internal error",
        cause="An internal check of NCCL failed, usually because of a flaky network card or "
        "an inconsistent state after a peer failed.",
        next_step=_RETRY_COMM,
        documented="NCCL src/init.cc ncclGetErrorString(ncclInternalError)",
    ),
    Signature(
        rule="nccl-cuda-error",
        family="gpu",
        pattern=_re(r"unhandled cuda error|ncclUnhandledCudaError"),
        retryable=True,
        error_code="NCCL_CUDA_ERROR",
        message="NCCL reported an unhandled CUDA error",
        cause="A CUDA call inside NCCL failed, which usually points at the GPU or its driver.",
        next_step=_HARDWARE_NEXT,
        documented="NCCL src/init.cc ncclGetErrorString(ncclUnhandledCudaError)",
    ),
    # Decision: not retryable. NCCL puts its intra-node buffers in /dev/shm; when it cannot
    # create or map them there (a container's 64 MB default /dev/shm, docker without
    # --ipc=host or --shm-size), every attempt on such an instance fails the same way. It is
    # the line NCCL gives after "Last error:" of an ncclSystemError, which alone looks like a
    # peer or network failure.
    Signature(
        rule="nccl-shm-segment-failed",
        family="network",
        # NCCL's words when it creates its segment, and when it cannot grow it to the size it needs
        # ("NCCL WARN Error: failed to extend /dev/shm/nccl-03v824 to 4194660 bytes", corpus storage-016).
        pattern=_re(r"Error while (?:creating|attaching to) shared memory segment|failed to extend /dev/shm/"),
        retryable=False,
        error_code="NCCL_SHM_FAILED",
        message="NCCL could not set up its shared memory (/dev/shm)",
        cause="NCCL could not create, map or grow its buffers in /dev/shm, which is too small in the "
        "instance (a container's default is 64 MB); every attempt fails the same way.",
        next_step="Give the instance more shared memory (docker --ipc=host or --shm-size, a memory-backed "
        "emptyDir on /dev/shm in Kubernetes), or set NCCL_SHM_DISABLE=1, then submit the job again.",
        documented='NCCL src/misc/shmutils.cc ncclShmOpen ("Error while creating shared memory segment %s '
        '(size %ld)", "Error: failed to extend %s to %ld bytes"); NCCL troubleshooting, Docker: "--shm-size=1g" or '
        '"--ipc=host"; corpus storage-016',
    ),
    Signature(
        rule="cuda-invalid-device",
        family="user-error",
        pattern=_re(r"invalid device ordinal|cudaErrorInvalidDevice\b"),
        retryable=False,
        error_code="CUDA_INVALID_DEVICE",
        message="CUDA: invalid device ordinal",
        cause="The program asked for a GPU number that the instance does not have, most often more "
        "processes per node than GPUs (nproc_per_node) or a CUDA_VISIBLE_DEVICES that hides them.",
        next_step="Start one process per GPU the instance has (or ask for more GPUs), and set each "
        "process's device from LOCAL_RANK, then submit the job again.",
        documented='CUDA runtime cudaErrorInvalidDevice ("invalid device ordinal": "the device ordinal '
        'supplied by the user does not correspond to a valid CUDA device"); NCCL "Cuda failure '
        "'invalid device ordinal'\"",
    ),
    Signature(
        rule="nccl-invalid-usage",
        family="user-error",
        pattern=_re(r"ncclInvalidUsage|NCCL error in:[^\n]{0,400}?, invalid usage"),
        retryable=False,
        error_code="NCCL_INVALID_USAGE",
        message="NCCL reported invalid usage",
        cause="The program used NCCL incorrectly, e.g. two ranks on the same GPU or "
        "mismatched collective calls across ranks.",
        next_step="Check the device each rank uses (LOCAL_RANK) and that every rank calls the "
        "same collectives in the same order, then submit the job again.",
        documented="NCCL src/init.cc ncclGetErrorString(ncclInvalidUsage)",
    ),
    Signature(
        rule="nccl-invalid-argument",
        family="user-error",
        pattern=_re(r"ncclInvalidArgument|NCCL error in:[^\n]{0,400}?, invalid argument"),
        retryable=False,
        error_code="NCCL_INVALID_ARGUMENT",
        message="NCCL reported an invalid argument",
        cause="The program passed an invalid value to NCCL (wrong tensor, device or size).",
        next_step=_FIX_CODE,
        documented="NCCL src/init.cc ncclGetErrorString(ncclInvalidArgument)",
    ),
    Signature(
        rule="nccl-watchdog-timeout",
        family="collective-timeout",
        # The watchdog's message, or the frame that only its timeout throws from when a log kept
        # only the C++ stack ("Exception raised from checkTimeout at ...", "frame #1:
        # c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(...)"; corpus collective-timeout-014).
        pattern=_re(
            r"Watchdog caught collective operation timeout|WorkNCCL::checkTimeout\(|Exception raised from checkTimeout at"
        ),
        retryable=False,
        error_code="NCCL_COLLECTIVE_TIMEOUT",
        message="NCCL watchdog: a collective operation timed out",
        cause=_COLLECTIVE_TIMEOUT_CAUSE,
        next_step=_COLLECTIVE_TIMEOUT_NEXT,
        cascade_like=True,
        # Decision from the corpus: of its collective-timeout entries with no other error,
        # the sources blame the program (desyncs, rank-0-only work) far more often than a
        # transient stall, so a bare watchdog timeout is not retried; a peer's real error
        # (killed, network, GPU) is picked as the root cause over it.
        documented="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp WorkNCCL::checkTimeout; corpus "
        "collective-timeout-005, -007, -013 (github.com/pytorch/pytorch/issues/97191), -014 (the stack alone)",
    ),
    Signature(
        rule="nccl-communicator-aborted",
        family="collective-timeout",
        pattern=_re(r"NCCL communicator was aborted"),
        retryable=True,
        error_code="NCCL_COMM_ABORTED",
        message="The NCCL communicator was aborted",
        cause="The process group was torn down after an earlier error on this or another rank.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented='torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp ("NCCL communicator was aborted on rank")',
    ),
    Signature(
        rule="nccl-heartbeat-timeout",
        family="collective-timeout",
        pattern=_re(r"Heartbeat monitor timed out"),
        retryable=True,
        error_code="NCCL_HEARTBEAT_TIMEOUT",
        message="The NCCL heartbeat monitor timed out",
        cause="The process group's watchdog thread itself stopped making progress, usually "
        "because the GPU or a collective is stuck.",
        next_step=_HARDWARE_NEXT,
        documented="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp HeartbeatMonitor (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC)",
    ),
    # IBV_WC_LOC_PROT_ERR (4): the adapter refused the local buffer, a host configuration
    # problem (PCIe ACS blocking GPUDirect RDMA, a missing peer-memory module) that fails
    # every run, unlike a transport retry timeout (12) after a link or peer went away.
    Signature(
        rule="nccl-ib-local-protection-error",
        family="network",
        pattern=_re(r"NET/IB ?:[^\n]{0,200}?Got completion[^\n]{0,200}?with error 4,"),
        retryable=False,
        error_code="NCCL_IB_LOCAL_PROTECTION",
        message="NCCL InfiniBand: local protection error (error 4)",
        cause="The InfiniBand adapter refused to access the GPU's memory (a local protection "
        "error), which points at the node's configuration, e.g. PCIe ACS left on so "
        "GPUDirect RDMA cannot work.",
        next_step="Ask an administrator to disable PCIe ACS or fix GPUDirect RDMA on the nodes, or "
        "set NCCL_NET_GDR_LEVEL to avoid it, then submit the job again.",
        documented="ibv_wc_status IBV_WC_LOC_PROT_ERR = 4 (rdma-core verbs.h); corpus network-009 "
        "(NCCL maintainer: error 4 is usually ACS)",
    ),
    Signature(
        rule="nccl-ib-completion-error",
        family="network",
        pattern=_re(r"NET/IB ?:[^\n]{0,200}?Got completion[^\n]{0,200}?(?:error|status)"),
        retryable=True,
        error_code="NCCL_IB_ERROR",
        message="NCCL InfiniBand transport reported a failed completion",
        cause="An InfiniBand/RoCE transfer failed (e.g. retry count exceeded), because a peer "
        "went away or a link is bad.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented='NCCL src/transport/net_ib.cc ncclIbTest ("NET/IB : Got completion from peer ... with error")',
    ),
    # ---- Gloo ------------------------------------------------------------------------
    Signature(
        rule="gloo-connect-full-mesh-failed",
        family="network",
        pattern=_re(r"Gloo connectFullMesh failed"),
        retryable=True,
        error_code="GLOO_CONNECT_FAILED",
        message="Gloo could not connect all ranks to each other",
        cause="While the process group was being created, some rank could not reach the "
        "others (a peer was not up yet, died, or a stale address was used).",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented='torch/csrc/distributed/c10d/ProcessGroupGloo.cpp ("Gloo connectFullMesh failed with")',
    ),
    Signature(
        rule="gloo-connection-closed",
        family="network",
        pattern=_re(r"Connection closed by (?:remote )?peer"),
        retryable=True,
        error_code="CONNECTION_CLOSED",
        message="The connection was closed by a peer",
        cause=_PEER_OR_NETWORK,
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented='third_party/gloo/gloo/transport/tcp/pair.cc; NCCL src/misc/socket.cc ("Connection closed by remote peer")',
    ),
    Signature(
        rule="gloo-operation-timeout",
        family="collective-timeout",
        pattern=_re(r"Timed out waiting \d{1,15}ms for (?:recv|send) operation to complete"),
        # Not retried, as the NCCL watchdog timeout (see there): with no other error in the
        # log, a collective that waited out its timeout is most often ranks that disagree.
        retryable=False,
        error_code="GLOO_TIMEOUT",
        message="Gloo timed out waiting for a peer's data",
        cause=_COLLECTIVE_TIMEOUT_CAUSE,
        next_step=_COLLECTIVE_TIMEOUT_NEXT,
        cascade_like=True,
        documented="third_party/gloo/gloo/transport/tcp/unbound_buffer.cc waitRecv/waitSend",
    ),
    # ---- sockets (strerror texts of Linux errno) -----------------------------------
    # Matched ignoring case: Go programs (container runtimes, registries' clients, kubelet)
    # print the same errno texts lower-cased ("read: connection reset by peer",
    # "connect: connection refused"), and they are the same failure. Windows names the same
    # errors in Winsock's words ("[WinError 10054] An existing connection was forcibly closed by
    # the remote host"), read with them.
    Signature(
        rule="connection-reset",
        family="network",
        pattern=_re(r"Connection reset by peer|An existing connection was forcibly closed by the remote host", _I),
        retryable=True,
        error_code="ECONNRESET",
        message="The connection was reset by a peer",
        cause=_PEER_OR_NETWORK,
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="Linux errno ECONNRESET (104), strerror text; Winsock WSAECONNRESET (10054) text; corpus "
        "external-services-314 (W&B's connection reset when the GPU server lost its internet connection)",
    ),
    Signature(
        rule="connection-refused",
        family="network",
        pattern=_re(r"Connection refused|the target machine actively refused it", _I),
        retryable=True,
        error_code="ECONNREFUSED",
        message="A connection was refused",
        cause="Nothing was listening at the address this instance connected to: the master "
        "or a peer was not started yet or had already exited.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="Linux errno ECONNREFUSED (111), strerror text; Winsock WSAECONNREFUSED (10061) text "
        '("No connection could be made because the target machine actively refused it")',
    ),
    Signature(
        rule="broken-pipe",
        family="network",
        pattern=_re(r"Broken pipe", _I),
        retryable=True,
        error_code="EPIPE",
        message="Broken pipe: the other end of a connection went away",
        cause=_PEER_OR_NETWORK,
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="Linux errno EPIPE (32), strerror text",
    ),
    Signature(
        rule="no-route-to-host",
        family="network",
        pattern=_re(
            r"No route to host|Network is unreachable|Host is down"
            r"|A socket operation was attempted to an unreachable (?:host|network)",
            _I,
        ),
        retryable=True,
        error_code="EHOSTUNREACH",
        message="No route to host",
        cause="The network could not reach another node of the job.",
        next_step=_HARDWARE_NEXT,
        documented="Linux errno EHOSTUNREACH (113), strerror text; Winsock WSAEHOSTUNREACH (10065), "
        "WSAENETUNREACH (10051) texts",
    ),
    Signature(
        rule="connection-timed-out",
        family="network",
        pattern=_re(r"Connection timed out|connect\(\) timed out|did not properly respond after a period of time", _I),
        retryable=True,
        error_code="ETIMEDOUT",
        message="A network connection timed out",
        cause="Another node did not answer in time; the network or that node is in trouble.",
        next_step=_RETRY_COMM,
        documented="Linux errno ETIMEDOUT (110), strerror text; NCCL socket connect; Winsock WSAETIMEDOUT "
        '(10060) text ("A connection attempt failed because the connected party did not properly respond '
        'after a period of time")',
    ),
    # Decision: not retryable. Since pytorch/pytorch#74641 ("c10d: retry dns lookup failures",
    # for #73682: Kubernetes pods' DNS records appear up to ~30 s after the pod) c10d's client
    # socket does not give up on a failed lookup: it logs this line and looks the name up
    # again until its connect timeout runs out (torch/csrc/distributed/c10d/socket.cpp
    # SocketConnectOp::tryConnect, `retry = true` on a getaddrinfo error; the line repeats
    # while peers start, kubernetes-sigs/jobset#93). A process that ended with it has waited
    # out that start-up race already; the name does not resolve from this node (the machine's
    # own host name unknown to DNS or /etc/hosts, a wrong MASTER_ADDR, a missing search
    # domain), and a restart waits in vain again. The older TCPStore that failed on the first
    # lookup ("host not found") stays the retryable race below.
    Signature(
        rule="c10d-name-not-resolved",
        family="rendezvous",
        pattern=_re(r"network addresses of \([^\n]{0,300}?\) cannot be retrieved \(gai error"),
        retryable=False,
        error_code="NAME_NOT_RESOLVED_AFTER_RETRIES",
        message="The master's host name did not resolve, even after c10d retried",
        cause="The rendezvous host name did not resolve from this node for as long as PyTorch kept "
        "looking it up, so this is no start-up race: the name is wrong or unknown here (often "
        "the machine's own host name, missing from DNS and /etc/hosts).",
        next_step="Set MASTER_ADDR (or rdzv_endpoint) to a name every node resolves, or to the master's "
        "IP address, and check /etc/hosts and the pods' DNS settings, then submit the job again.",
        documented='torch/csrc/distributed/c10d/socket.cpp SocketConnectOp::tryConnect ("The {IPv4 |IPv6 '
        '}network addresses of ({}, {}) cannot be retrieved (gai error: {} - {})", then a retry '
        "until the connect timeout), pytorch/pytorch#74641; corpus rendezvous-004, -013",
    ),
    Signature(
        rule="name-resolution-failed",
        family="rendezvous",
        pattern=_re(r"Temporary failure in name resolution"),
        retryable=True,
        error_code="EAI_AGAIN",
        message="Temporary failure in name resolution",
        cause="The DNS lookup of another node's name failed for the moment.",
        next_step=_RETRY_COMM,
        documented="glibc gai_strerror(EAI_AGAIN)",
    ),
    Signature(
        rule="address-in-use",
        family="rendezvous",
        pattern=_re(r"Address already in use|EADDRINUSE"),
        retryable=True,
        error_code="EADDRINUSE",
        message="The port is already in use",
        cause="The rendezvous port was still taken, e.g. by a process of an earlier attempt.",
        next_step="The job is retried with a fresh port. If you hard-code MASTER_PORT, let the "
        "console choose it instead.",
        documented="Linux errno EADDRINUSE (98); torch/csrc/distributed/c10d/socket.cpp",
    ),
    # ---- store and rendezvous ------------------------------------------------------
    # Decision: not retried, as a collective timeout (nccl-watchdog-timeout). "Socket Timeout"
    # is TCPStore's wait for a key another rank never set in time: a store-based barrier or
    # the exchange of NCCL's unique id at a rank's first collective. A master that is not up
    # yet fails to connect instead (store-connect-timeout, connection refused), so what is
    # left is the desync of a collective timeout: one rank busy alone (corpus
    # collective-timeout-021: rank 0 evaluating while the others wait in a broadcast).
    Signature(
        rule="store-socket-timeout",
        family="collective-timeout",
        pattern=_re(r"Socket Timeout"),
        retryable=False,
        error_code="STORE_TIMEOUT",
        message="The distributed key-value store timed out waiting for another rank",
        cause="A rank waited longer than the store's timeout for a key another rank should have set "
        "(a store-based barrier, or NCCL's id at the first collective): the other rank was busy "
        "elsewhere or took another path, which a restart repeats.",
        next_step=_COLLECTIVE_TIMEOUT_NEXT,
        cascade_like=True,
        documented='torch/csrc/distributed/c10d/TCPStore.cpp doWait (DistStoreError "Socket Timeout"); '
        "corpus collective-timeout-021 (rwth-i6/returnn#1621)",
    ),
    Signature(
        rule="store-connect-timeout",
        family="rendezvous",
        pattern=_re(r"client socket has timed out after \d{1,15}"),
        retryable=True,
        error_code="STORE_CONNECT_TIMEOUT",
        message="Connecting to the rendezvous store timed out",
        cause="This instance could not reach the master's store in time: the master was not "
        "up, died, or the network failed.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented='torch/csrc/distributed/c10d/socket.cpp ("The client socket has timed out after")',
    ),
    Signature(
        rule="store-clients-timeout",
        family="rendezvous",
        pattern=_re(r"Timed out after \d{1,15} seconds waiting for clients"),
        retryable=True,
        error_code="STORE_CLIENTS_TIMEOUT",
        message="The rendezvous store timed out waiting for the other ranks",
        cause="The master waited for all ranks to join but some never arrived.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="torch/distributed/rendezvous.py _create_c10d_store / TCPStore waitForWorkers",
    ),
    Signature(
        rule="rendezvous-timeout",
        family="rendezvous",
        pattern=_re(r"RendezvousTimeoutError"),
        retryable=True,
        error_code="RENDEZVOUS_TIMEOUT",
        message="Rendezvous timed out",
        cause="Not enough instances joined the rendezvous in time.",
        next_step="The job is retried. If it repeats, check that every instance starts and can "
        "reach the master; an instance waiting a long time for resources also causes this.",
        documented="torch/distributed/elastic/rendezvous/api.py RendezvousTimeoutError",
    ),
    # Decision: not retryable. torchelastic closes a rendezvous when one agent decides the job
    # is finished (it succeeded, or spent its restarts), and "a closed rendezvous means all
    # future attempts to re-rendezvous within same job will fail" (RendezvousHandler.is_closed):
    # a restart under the same run id meets the closed rendezvous again. Cascade-like: when
    # the agent that closed it failed for a retryable reason, its failure is the root cause.
    Signature(
        rule="rendezvous-closed",
        family="rendezvous",
        pattern=_re(r"RendezvousClosedError"),
        retryable=False,
        error_code="RENDEZVOUS_CLOSED",
        message="The rendezvous was closed",
        cause="The rendezvous was closed because an agent of the job decided the job had finished "
        "(it succeeded or spent its restarts); every later attempt to join it under the same "
        "run id fails the same way.",
        next_step="Look for the instance whose agent finished or failed first (its error is the root "
        "cause); submit the job again with a new rendezvous id (--rdzv-id) or a fresh "
        "rendezvous store.",
        cascade_like=True,
        documented="torch/distributed/elastic/rendezvous/api.py RendezvousClosedError; RendezvousHandler.is_closed "
        '("A closed rendezvous means all future attempts to re-rendezvous within same job will '
        'fail"); corpus rendezvous-017 (kubeflow/trainer#1638: the etcd rendezvous stayed closed '
        "across pod restarts)",
    ),
    Signature(
        rule="rendezvous-connection",
        family="rendezvous",
        pattern=_re(r"RendezvousConnectionError"),
        retryable=True,
        error_code="RENDEZVOUS_CONNECTION",
        message="The connection to the rendezvous backend failed",
        cause="The instance could not reach the rendezvous store on the master.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented="torch/distributed/elastic/rendezvous/api.py RendezvousConnectionError",
    ),
    # ---- GPU hardware and CUDA -----------------------------------------------------
    Signature(
        rule="cuda-ecc-error",
        family="gpu",
        pattern=_re(r"uncorrectable ECC error|cudaErrorECCUncorrectable", _I),
        retryable=True,
        error_code="GPU_ECC_ERROR",
        message="The GPU reported an uncorrectable ECC memory error",
        cause="The GPU's memory has a hardware fault.",
        next_step=_HARDWARE_NEXT,
        documented='CUDA runtime cudaErrorECCUncorrectable ("uncorrectable ECC error encountered")',
    ),
    # Xids by meaning (NVIDIA's Xid catalog): 13, 31 and 43 are raised by what the
    # application ran (an exception in a kernel, a memory page fault, a stopped channel);
    # 119 and 120 are GSP firmware timeouts of known driver branches, fixed by a driver
    # upgrade. Neither goes away on a rerun on the same software.
    Signature(
        rule="gpu-xid-application",
        family="gpu",
        pattern=_re(r"NVRM: Xid \([^)\n]{0,60}\): (?P<xid>13|31|43),"),
        retryable=False,
        error_code="GPU_XID_APPLICATION",
        message="The NVIDIA driver reported Xid {xid}, raised by the program's GPU work",
        cause="The NVIDIA driver reported an Xid error that the program's own GPU work causes "
        "(an exception in a kernel or an invalid memory access).",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 to find the failing operation and fix it; if it "
        "only ever happens on one node, ask an administrator to check that GPU.",
        documented="NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors): 13 Graphics Engine "
        "Exception, 31 GPU memory page fault, 43 GPU stopped processing: user application",
    ),
    Signature(
        rule="gpu-xid-gsp",
        family="gpu",
        pattern=_re(r"NVRM: Xid \([^)\n]{0,60}\): (?P<xid>119|120),"),
        retryable=False,
        error_code="GPU_XID_GSP",
        message="The NVIDIA driver reported Xid {xid} (GSP firmware timeout)",
        cause="The GPU's system processor (GSP) stopped answering the driver, a known bug of some "
        "driver versions that repeats until the driver is changed.",
        next_step="Ask an administrator to upgrade the NVIDIA driver on the node (or turn GSP "
        "firmware off), then submit the job again.",
        documented="NVIDIA Xid catalog: 119/120 GSP RPC timeout / GSP error; corpus gpu-014 "
        "(driver 525 release notes: fixed in 525.105.17)",
    ),
    Signature(
        rule="gpu-xid",
        family="gpu",
        pattern=_re(r"NVRM: Xid \([^)\n]{0,60}\): (?P<xid>\d{1,4})"),
        retryable=True,
        error_code="GPU_XID",
        message="The NVIDIA driver reported Xid {xid}",
        cause="The NVIDIA driver reported a GPU fault (an Xid error).",
        next_step=_HARDWARE_NEXT,
        documented='NVIDIA Xid errors, docs.nvidia.com/deploy/xid-errors (kernel log "NVRM: Xid")',
    ),
    Signature(
        rule="gpu-fallen-off-bus",
        family="gpu",
        pattern=_re(
            r"GPU has fallen off the bus|GPU is lost|Unable to determine the device handle for GPU"
            r"|RmInitAdapter failed"
        ),
        retryable=True,
        error_code="GPU_LOST",
        message="A GPU has fallen off the bus",
        cause="A GPU stopped responding to the host (hardware or power problem; Xid 79).",
        next_step=_HARDWARE_NEXT,
        documented='NVIDIA Xid 79, docs.nvidia.com/deploy/xid-errors; nvidia-smi "Unable to determine the '
        'device handle for GPU <bus id>: Unknown Error" and NVRM "RmInitAdapter failed" for a GPU the '
        "driver can no longer reach",
    ),
    # Decision: not retryable, as an illegal memory access (below) and the Xids 13/31/43 it
    # comes with (above). CUDA documents cudaErrorLaunchFailure as "an exception occurred on
    # the device while executing a kernel", commonly an invalid device pointer or an
    # out-of-bounds shared-memory access: the program's own kernel, or a build of torch or an
    # extension that does not fit the node, which an unchanged rerun repeats. A GPU that is
    # really failing says so in its own lines (Xid 48/79, ECC, fallen off the bus), which win
    # when they come later in the tail.
    Signature(
        rule="cuda-launch-failure",
        family="gpu",
        pattern=_re(r"unspecified launch failure|cudaErrorLaunchFailure"),
        retryable=False,
        error_code="CUDA_LAUNCH_FAILURE",
        message="CUDA: unspecified launch failure",
        cause='A GPU kernel raised an exception while it ran (CUDA\'s "unspecified launch failure"): '
        "most often an invalid pointer or an out-of-bounds access in a kernel, or a torch or "
        "extension build that does not fit this GPU, which a restart repeats.",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 to find the failing operation, and check that torch, "
        "CUDA and compiled extensions match; if it only ever happens on one node, treat it as "
        'hardware and add "unspecified launch failure" as a retryable keyword.',
        documented='CUDA runtime API cudaErrorLaunchFailure (719): "An exception occurred on the device while '
        "executing a kernel. Common causes include dereferencing an invalid device pointer and "
        'accessing out of bounds shared memory"; corpus gpu-010 (pytorch/pytorch#2567: recurred '
        "with one torch build, gone with the next)",
    ),
    # Decision: an illegal memory access is treated as a bug (not retryable). In training it
    # is most often an index out of range or a faulty custom kernel, which repeats at the
    # same step on every attempt; a user who sees it as a hardware fault can add
    # "illegal memory access" as a retryable keyword.
    Signature(
        rule="cuda-illegal-memory-access",
        family="user-error",
        pattern=_re(r"an illegal memory access was encountered|cudaErrorIllegalAddress"),
        retryable=False,
        error_code="CUDA_ILLEGAL_ADDRESS",
        message="CUDA: an illegal memory access was encountered",
        cause="A GPU kernel read or wrote memory outside its buffers, usually an index out of "
        "range or a bug in a custom kernel.",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 to find the operation and fix it. If it only "
        'ever happens on one node, treat it as hardware and add "illegal memory access" '
        "as a retryable keyword.",
        documented='CUDA runtime cudaErrorIllegalAddress ("an illegal memory access was encountered")',
    ),
    Signature(
        rule="cuda-device-assert",
        family="user-error",
        pattern=_re(r"device-side assert triggered"),
        retryable=False,
        error_code="CUDA_DEVICE_ASSERT",
        message="CUDA: device-side assert triggered",
        cause="A check inside a GPU kernel failed, usually a label or index outside the "
        "valid range (e.g. a class id >= the number of classes).",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 (or on CPU) to see which check failed, fix "
        "the data or code, and submit the job again.",
        documented='CUDA runtime cudaErrorAssert ("device-side assert triggered")',
    ),
    Signature(
        rule="cuda-no-device",
        family="gpu",
        pattern=_re(r"no CUDA-capable device is detected|cudaErrorNoDevice"),
        retryable=True,
        error_code="CUDA_NO_DEVICE",
        message="No CUDA-capable device was detected",
        cause="The instance started without a usable GPU: the node's driver or device plugin failed to give it one.",
        next_step=_HARDWARE_NEXT,
        documented='CUDA runtime cudaErrorNoDevice ("no CUDA-capable device is detected")',
    ),
    Signature(
        rule="cuda-driver-too-old",
        family="startup",
        pattern=_re(r"CUDA driver version is insufficient for CUDA runtime version"),
        retryable=False,
        error_code="CUDA_DRIVER_INSUFFICIENT",
        message="The CUDA driver is older than the CUDA runtime in the image",
        cause="The image was built for a newer CUDA than the node's driver supports.",
        next_step="Use an image built for the node's CUDA version, or ask for nodes with a newer driver.",
        documented="CUDA runtime cudaErrorInsufficientDriver",
    ),
    # ---- memory --------------------------------------------------------------------
    Signature(
        rule="cuda-out-of-memory",
        family="user-error",
        pattern=_re(
            r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
            # NCCL's CUDACHECK, the "Last error:" of an ncclUnhandledCudaError: its buffers did
            # not fit beside the program's tensors
            r"|Cuda failure (?:\d{1,4} )?'out of memory'"
        ),
        retryable=False,
        error_code="CUDA_OOM",
        message="CUDA out of memory",
        cause="The program needed more GPU memory than the GPU has.",
        next_step="Lower the batch size or sequence length, or use activation checkpointing or more "
        "GPUs, then submit the job again; a restart would run out of memory the same way.",
        documented='torch/csrc/cuda/ (torch.OutOfMemoryError "CUDA out of memory. Tried to allocate"); NCCL '
        "CUDACHECK (\"NCCL WARN Cuda failure 'out of memory'\")",
    ),
    # Decision: only explicit OOM-killer evidence counts as an out-of-memory kill. A bare
    # "Killed" (what a shell prints for any SIGKILL) does not: preemption and people send
    # SIGKILL too, and those are retryable.
    Signature(
        rule="oom-killed",
        family="signals",
        pattern=_re(
            r"Memory cgroup out of memory|oom[-_]kill event|OOM Killed|OOMKilled|memory\+swap: usage"
            r"|task \d{1,6}: Out Of Memory",
            _I,
        ),
        retryable=False,
        error_code="OOM_KILLED",
        message="Killed for running out of memory",
        cause="The instance used more memory than its own limit, so the system killed it (the OOM killer).",
        next_step="Raise the memory of the instance (resource_config.memory) and submit the job again.",
        explains_kill=True,
        documented='Linux mm/memcontrol.c ("Memory cgroup out of memory", "memory+swap: usage ..., limit"); '
        'slurmstepd ("Detected 1 oom_kill event"); corpus signals-016',
    ),
    # Decision (issue 13): the node-wide OOM killer picks a victim among every process on
    # the node, so its kill often comes from other tenants' memory, and a rerun (maybe on
    # another node) succeeds; a job that needs more memory than any node has is stopped by
    # the repeated-failure guard and --max-num-of-same-error. A kill for exceeding the
    # instance's own memory limit (cgroup, OOMKilled) is the entry above: not retried.
    Signature(
        rule="oom-killer",
        family="signals",
        # "Free swap  = 0kB" is the kernel's memory report (show_mem) that the OOM killer
        # prints for a node-wide OOM only; a cgroup's OOM prints the cgroup's usage instead.
        pattern=_re(r"Out of memory: Kill(?:ed)? process|invoked oom-killer|Free swap  = 0kB", _I),
        retryable=True,
        error_code="NODE_OOM_KILLED",
        message="Killed by the node's OOM killer",
        cause="The node ran out of memory and the kernel's OOM killer killed this instance; the "
        "memory may have been taken by other processes on the node.",
        next_step="The job is retried automatically. If it is killed again, raise the memory of the "
        "instance (resource_config.memory) or lower the job's memory use.",
        explains_kill=True,
        documented='Linux mm/oom_kill.c ("Out of memory: Killed process", "invoked oom-killer"); '
        'mm/oom_kill.c dump_header: show_mem() only when !is_memcg_oom ("Free swap  = %lukB"); '
        "corpus signals-002 (system OOM killer on an overcommitted node), signals-023",
    ),
    Signature(
        rule="python-memory-error",
        family="user-error",
        pattern=_re(r"(?m)^" + _PREFIX + r"MemoryError(?::|[ \t]*$)"),
        retryable=False,
        error_code="HOST_OOM",
        message="Python raised MemoryError",
        cause="The program ran out of host memory.",
        next_step="Raise the memory of the instance (resource_config.memory) or load less data at once.",
        documented="Python built-in exception MemoryError",
    ),
    Signature(
        rule="shared-memory-exhausted",
        family="signals",
        pattern=_re(r"insufficient shared memory \(shm\)"),
        retryable=False,
        error_code="SHM_EXHAUSTED",
        message="A DataLoader worker ran out of shared memory",
        cause="The data-loading workers exchange batches through shared memory (/dev/shm), and it is too small.",
        next_step="Give the instance more shared memory, or use fewer DataLoader workers "
        "(num_workers), then submit the job again.",
        documented='torch/utils/data/_utils/signal_handling.py / worker.py ("insufficient shared memory (shm)")',
    ),
    Signature(
        rule="dataloader-worker-killed",
        family="signals",
        pattern=_re(r"DataLoader worker \(pid[^\n]{0,60}?\) (?:is killed by signal|exited unexpectedly)"),
        retryable=False,
        error_code="DATALOADER_WORKER_KILLED",
        message="A DataLoader worker process was killed",
        cause="A data-loading worker process was killed, most often because the machine ran out of memory.",
        next_step="Raise the memory of the instance or use fewer DataLoader workers, then submit the job again.",
        explains_kill=True,
        documented='torch/utils/data/dataloader.py ("DataLoader worker (pid(s) ...) exited unexpectedly")',
    ),
    # ---- node loss and preemption --------------------------------------------------
    Signature(
        rule="node-failure",
        family="preemption",
        pattern=_re(r"CANCELLED AT [^\n]{0,40}?DUE TO NODE FAIL"),
        retryable=True,
        error_code="NODE_LOST",
        message="The node failed",
        cause="The node running the instance failed or lost contact with the scheduler.",
        next_step=_HARDWARE_NEXT,
        documented='Slurm slurmstepd ("*** STEP ... CANCELLED AT ... DUE TO NODE FAILURE ***")',
    ),
    Signature(
        rule="preempted",
        family="preemption",
        pattern=_re(r"CANCELLED AT [^\n]{0,40}?DUE TO PREEMPTION"),
        retryable=True,
        error_code="PREEMPTED",
        message="The instance was preempted",
        cause="The scheduler took the resources back for other work.",
        next_step="The job is retried automatically when resources are free again.",
        documented='Slurm slurmstepd ("*** JOB ... CANCELLED AT ... DUE TO PREEMPTION ***")',
    ),
    Signature(
        rule="launcher-received-signal",
        family="signals",
        pattern=_re(r"SignalException: Process \d{1,10} got signal: (?P<signum>\d{1,3})"),
        retryable=True,
        error_code="LAUNCHER_SIGNAL",
        message="The launcher received signal {signum} and stopped its workers",
        cause="Something outside the program (the scheduler, the node, a person) told the launcher to stop.",
        next_step="The job is retried automatically; if a person stopped it on purpose, stop the job in the console instead.",
        cascade_like=True,
        documented="torch/distributed/elastic/multiprocessing/api.py SignalException",
    ),
    Signature(
        rule="worker-killed-by-signal",
        family="signals",
        pattern=_re(r"Signal (?P<signum>\d{1,3}) \((?P<signame>SIG[A-Z]{2,8})\) received by PID"),
        retryable=True,
        error_code="WORKER_SIGNAL",
        message="A worker process was killed by {signame}",
        cause="A worker process was killed by a signal, without an error of its own in the log.",
        next_step="The job is retried automatically; if it repeats on the same node, check that node.",
        documented='torch/distributed/elastic/multiprocessing/api.py ("Signal %s (%s) received by PID %s")',
    ),
    # Ray tells a system failure (the actor's or worker's process died: killed, its node
    # gone, a crash) from an application error (the exception is shown, "died because of an
    # error raised in its creation task"), and retries only system failures by default; so
    # does the monitor. A process that crashes the same way every time is stopped by the
    # repeated-failure guard.
    Signature(
        rule="ray-process-died",
        family="signals",
        pattern=_re(r"The (?:actor|worker) died unexpectedly (?:before finishing|while executing) this task"),
        retryable=True,
        error_code="RAY_PROCESS_DIED",
        message="A Ray actor or worker process died",
        cause="A Ray actor or worker process of the job died without an error of its own (killed, "
        "its node lost or reclaimed), which Ray counts as a system failure, not the program's.",
        next_step="The job is retried automatically. If it repeats, look at the Ray logs of the node "
        "the process ran on (raylet.out, dmesg) for the out-of-memory killer or a lost node.",
        cascade_like=True,
        documented='Ray ray.exceptions.RayActorError/ActorDiedError ("the actor process is dead") and '
        'WorkerCrashedError ("The worker died unexpectedly while executing this task"); Ray fault '
        "tolerance docs: system failures are retried by default, application exceptions are not; "
        "corpus preemption-027 (ray-project/ray#29982: a reclaimed spot node)",
    ),
    # ---- from the corpus (issue 13): infrastructure going away under the job ---------
    Signature(
        rule="cloud-preemption-notice",
        family="preemption",
        pattern=_re(
            r"termination is imminent|spot instance (?:interruption|termination)|lifecycle termination"
            r"|preemption notice|(?:was|is|been) preempted|preempted by |imminent node shutdown"
            r"|rebalance recommendation|interruption warning|instances\.preempted"
            # Kubernetes pod condition DisruptionTarget: the scheduler preempted the pod,
            # a NoExecute taint (node unreachable/not ready) or a drain removed it
            r"|PreemptionBy(?:Kube)?Scheduler|DeletionByTaintManager|EvictionByEvictionAPI|DeletionByPodGC",
            _I,
        ),
        retryable=True,
        error_code="PREEMPTED",
        message="The node was preempted or reclaimed",
        cause="The cloud or the scheduler took the node back (a spot/preemptible reclaim, a "
        "scale-in or a scheduler preemption); the program itself did not fail.",
        next_step="The job is retried automatically when resources are free again.",
        explains_kill=True,
        documented='GCP metadata "termination is imminent"; AWS spot interruption / ASG lifecycle '
        'termination notices; Kubernetes "Pod was terminated in response to imminent node '
        'shutdown"; Ray "the actor\'s node was preempted"; GCE operation compute.instances.preempted; '
        "Kubernetes DisruptionTarget reasons (kubernetes.io/docs/concepts/workloads/pods/disruptions, "
        '"Pod disruption conditions"); corpus preemption-011, -019, -024',
    ),
    Signature(
        rule="node-died",
        family="preemption",
        pattern=_re(
            r"node has died|has been marked dead because|Node failure on |\(node failure\)|NODE_FAIL"
            r"|[Dd]ue to node failure|NodeDiedError|node\.kubernetes\.io/unreachable"
            r"|ORTE has lost communication with a remote daemon"
            # a BProc (Beowulf) compute node's daemon that lost its master: the node
            # unmounts its file systems and drops every process it ran
            r"|Ping timeout after \d{1,6} seconds - lost connection to master"
        ),
        retryable=True,
        error_code="NODE_LOST",
        message="A node of the job died",
        cause="A node running part of the job died or stopped answering the cluster (a reboot, "
        "a power-off, a lost heartbeat); the program itself did not fail.",
        next_step=_HARDWARE_NEXT,
        explains_kill=True,
        documented='Ray GCS ("has been marked dead because the detector has missed too many heartbeats", '
        '"The actor died because its node has died"); Slurm salloc "Node failure on"; '
        'BProc bpslave "Ping timeout after N seconds - lost connection to master?"; '
        "corpus preemption-015, -020, network-022",
    ),
    Signature(
        rule="time-limit",
        family="preemption",
        # Not google.api_core.exceptions.DeadlineExceeded / TF's DeadlineExceededError: an RPC's
        # deadline (service-timeout), not the scheduler's time limit.
        pattern=_re(
            r"DUE TO TIME LIMIT|(?<!exceptions\.)DeadlineExceeded(?!Error)|exceeded its active deadline"
            r"|active longer than specified deadline"
        ),
        retryable=False,
        error_code="TIME_LIMIT",
        message="The job ran into its time limit",
        cause="The scheduler stopped the instance because it ran longer than the time it asked "
        "for (Slurm --time, Kubernetes activeDeadlineSeconds); an unchanged rerun needs "
        "the same time and is stopped again.",
        next_step=_TIME_LIMIT_NEXT,
        explains_kill=True,
        explains_crash=True,
        documented='Slurm slurmstepd "*** JOB ... CANCELLED AT ... DUE TO TIME LIMIT ***"; Kubernetes Job '
        "condition DeadlineExceeded; corpus preemption-006, -021, signals-007",
    ),
    Signature(
        rule="cancelled",
        family="preemption",
        pattern=_re(r"CANCELLED AT [0-9T:.-]{10,30} \*\*\*"),
        retryable=False,
        error_code="CANCELLED",
        message="The job was cancelled",
        cause="Someone (or a script) cancelled the job at the scheduler (scancel), with no "
        "preemption or node failure given as the reason.",
        next_step=_CANCELLED_NEXT,
        explains_kill=True,
        explains_crash=True,
        documented='Slurm slurmstepd "*** STEP ... CANCELLED AT <time> ***" (scancel, no DUE TO); corpus preemption-022',
    ),
    Signature(
        rule="evicted-over-request",
        family="preemption",
        pattern=_re(r"which exceeds its request of"),
        retryable=False,
        error_code="EVICTED_OVER_REQUEST",
        message="Evicted for using more than it requested",
        cause="The node ran short of memory or disk, and the kubelet evicted this instance first "
        "because it used more than its resource request; it does the same on any busy node.",
        next_step="Give the instance a memory/disk request (resource_config) that covers what it "
        "uses, or use less, then submit the job again.",
        explains_kill=True,
        explains_crash=True,
        documented='Kubernetes kubelet eviction message "Container X was using N, which exceeds its '
        'request of M"; corpus preemption-004, -005',
    ),
    Signature(
        rule="evicted-over-own-limit",
        family="preemption",
        pattern=_re(
            r"exceeded its local ephemeral storage limit|Pod ephemeral local storage usage exceeds the "
            r"total limit|Usage of EmptyDir volume [^\n]{1,300}? exceeds the limit"
        ),
        retryable=False,
        error_code="EVICTED_OVER_LIMIT",
        message="Evicted for writing more local disk than its limit",
        cause="The kubelet evicted the instance because it wrote more to its local disk (ephemeral "
        "storage or an emptyDir volume) than its own limit allows; any node evicts it again.",
        next_step="Raise the instance's ephemeral-storage limit or emptyDir sizeLimit, or write large files "
        "(checkpoints, caches) to mounted storage instead, then submit the job again.",
        explains_kill=True,
        explains_crash=True,
        documented="Kubernetes kubelet pkg/kubelet/eviction/helpers.go (containerEphemeralStorageMessageFmt "
        '"Container %s exceeded its local ephemeral storage limit %q", podEphemeralStorageMessageFmt, '
        "emptyDirMessageFmt)",
    ),
    # ---- start-up -----------------------------------------------------------------
    Signature(
        rule="image-not-found",
        family="startup",
        pattern=_re(
            r"manifest unknown|manifest for [^\n]{0,200}? not found|repository does not exist"
            r"|pull access denied|requested access to the resource is denied"
            r"|unauthorized: authentication required"
            # containerd: the registry has no such reference ("failed to resolve reference
            # \"x:v9\": x:v9: not found")
            r"|failed to resolve reference [^\n]{0,300}?: not found"
        ),
        retryable=False,
        error_code="IMAGE_NOT_FOUND",
        message="The image or its tag does not exist, or pulling it was denied",
        cause="The registry answered that the image or tag does not exist, or that this node may "
        "not pull it; a retry gets the same answer.",
        next_step="Check the image name and tag, and give registry credentials if the repository is "
        "private, then submit the job again.",
        documented='Docker/containerd registry errors ("manifest unknown", "pull access denied"); corpus startup-007',
    ),
    # Decision (issue 26): a layer whose download broke off is the transfer, not the image;
    # the daemon itself retries these ("Download failed, retrying") and a later pull of the
    # same layer from the same registry gets it. A missing image or tag is the entry above.
    Signature(
        rule="image-layer-download-failed",
        family="startup",
        pattern=_re(
            r"Download failed, retrying(?: \(\d{1,3}/\d{1,3}\))?: "
            r"|ApplyLayer exit status 1 unexpected EOF|Untar re-exec error: exit status 1: output: unexpected EOF"
            r"|Error pulling image \([^)\n]{0,120}\) from [^\n]{0,300}?unexpected EOF"
        ),
        retryable=True,
        error_code="IMAGE_LAYER_DOWNLOAD_FAILED",
        message="Downloading a layer of the image broke off",
        cause="The connection to the registry broke while a layer of the image was being downloaded "
        "or unpacked, a hiccup of the transfer rather than a missing or wrong image.",
        next_step="The job is retried automatically. If it keeps happening on one node, check that "
        "node's network path to the registry (or a registry mirror in between).",
        documented='moby distribution/xfer download.go ("Download failed, retrying: %v", "Download failed, '
        'retrying (%d/%d): %v"); docker v1 pull "Error pulling image (%s) from %s, ... unexpected EOF", '
        '"ApplyLayer exit status 1 unexpected EOF", "Untar re-exec error: exit status 1: output: unexpected '
        'EOF"; corpus startup-201 (the same layer pulled fine a minute later)',
    ),
    # Decision (issue 26): a cloud that has no machine of the type right now says so in its
    # own words, and tells to try again later; an account whose quota for the type is too
    # small is told to ask for more, which no retry changes.
    Signature(
        rule="cloud-capacity-unavailable",
        family="startup",
        pattern=_re(
            r"CapacityError: Unable to provision requested ML compute capacity|InsufficientInstanceCapacity"
            r"|EC2InsufficientCapacityError|ZONE_RESOURCE_POOL_EXHAUSTED"
            r"|does not have enough resources available to fulfill the request|(?:Zonal)?AllocationFailed\b"
        ),
        retryable=True,
        error_code="CLOUD_CAPACITY_UNAVAILABLE",
        message="The cloud had no capacity for the requested machine type",
        cause="The cloud provider had no free machine of the requested type in that zone at the "
        "time (a stockout), so the instance could not be provisioned.",
        next_step="The job is retried automatically. If capacity stays short, allow another zone or "
        "instance type, or use a reservation.",
        documented='AWS SageMaker CapacityError ("Unable to provision requested ML compute capacity"); EC2 '
        'InsufficientInstanceCapacity ("We currently do not have sufficient capacity ... try again later"); '
        'GCE ZONE_RESOURCE_POOL_EXHAUSTED ("does not have enough resources available to fulfill the request. '
        'Try a different zone, or try again later"); Azure AllocationFailed / ZonalAllocationFailed; corpus '
        "startup-204 (SageMaker out of capacity: such jobs need to be retried)",
    ),
    Signature(
        rule="cloud-quota-exceeded",
        family="startup",
        pattern=_re(
            r"ResourceLimitExceeded|VcpuLimitExceeded|Quota '[A-Z0-9_]{2,60}' exceeded"
            r"|results in exceeding approved [^\n]{0,80}? quota"
        ),
        retryable=False,
        error_code="CLOUD_QUOTA_EXCEEDED",
        message="The account's quota for the requested resources is too small",
        cause="The cloud account's service limit (quota) for this instance type, GPU or vCPU count "
        "is lower than the job asks for; a retry asks for the same and is refused the same way.",
        next_step="Ask the cloud provider for a higher limit (or use a type within the quota), then "
        "submit the job again.",
        documented='AWS SageMaker/EC2 ResourceLimitExceeded, VcpuLimitExceeded ("Please contact AWS support to '
        'request an increase for this limit"); GCE "Quota \'NVIDIA_V100_GPUS\' exceeded. Limit: ..."; Azure '
        '"Operation could not be completed as it results in exceeding approved ... quota"; corpus startup-205',
    ),
    Signature(
        rule="container-config-error",
        family="startup",
        pattern=_re(
            r"CreateContainerConfigError|couldn't find key [^\n]{0,200}? in (?:Secret|ConfigMap)"
            r"|(?:secret|configmap)s? \"[^\"\n]{1,253}\" not found"
        ),
        retryable=False,
        error_code="CONTAINER_CONFIG_ERROR",
        message="The container's configuration refers to something that does not exist",
        cause=_CONFIG_ERROR_CAUSE,
        next_step=_CONFIG_ERROR_NEXT,
        documented='Kubernetes kubelet CreateContainerConfigError ("secret ... not found", "couldn\'t '
        'find key ... in Secret"); corpus startup-010, -012, -013',
    ),
    Signature(
        rule="nvml-driver-mismatch",
        family="gpu",
        pattern=_re(r"Driver/library version mismatch"),
        retryable=False,
        error_code="NVML_DRIVER_MISMATCH",
        message="NVIDIA driver/library version mismatch",
        cause="The node's NVIDIA user-space library does not match its loaded kernel driver (e.g. "
        "after an unattended upgrade); every GPU program on the node fails until it is fixed.",
        next_step=_HARDWARE_NEXT,
        documented='NVML "Failed to initialize NVML: Driver/library version mismatch"; corpus gpu-006',
    ),
    # ---- external services (model hubs, object stores, registries, package indexes) --
    # The Hugging Face libraries in offline mode (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE,
    # HF_DATASETS_OFFLINE, local_files_only=True) never look the file up: a model or dataset not
    # in the cache fails the same way on every attempt. Before service-denied, whose
    # "EntryNotFoundError" the same LocalEntryNotFoundError line holds.
    Signature(
        rule="hub-offline-mode",
        family="external-services",
        pattern=_re(r"and outgoing traffic has been\b|OfflineModeIsEnabled"),
        retryable=False,
        error_code="HUB_OFFLINE",
        message="The model hub is in offline mode and the file is not cached",
        cause="The Hugging Face libraries were set to offline mode (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE, "
        "HF_DATASETS_OFFLINE or local_files_only) and the model or dataset is not in the local cache.",
        next_step="Download the files into the cache the job uses (or point it at a local copy), or turn "
        "offline mode off for the job, then submit the job again.",
        documented='huggingface_hub file_download.py LocalEntryNotFoundError ("Cannot find the requested files '
        "in the disk cache and outgoing traffic has been disabled. To enable hf.co look-ups and downloads "
        "online, set 'local_files_only' to False.\"), _snapshot_download.py (\"Cannot find an appropriate cached "
        'snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled"), '
        "huggingface_hub/datasets OfflineModeIsEnabled; corpus external-services-303",
    ),
    Signature(
        rule="service-rate-limited",
        family="external-services",
        pattern=_re(
            r"Too Many Requests|toomanyrequests|pull rate limit|[Rr]ate limit exceeded|SlowDown"
            r"|Please reduce your request rate|ThrottlingException|RequestLimitExceeded|Slow Down"
            r"|ServerBusy|exceptions\.TooManyRequests|pull QPS exceeded"
        ),
        retryable=True,
        error_code="RATE_LIMITED",
        message="A service rate-limited the job",
        cause="A registry, model hub or object store refused requests for the moment because too "
        "many were made (HTTP 429, S3 SlowDown); the limit resets over time.",
        next_step="The job is retried automatically. If it keeps happening, authenticate to the "
        "service, cache the files, or lower the request rate.",
        documented='HTTP 429 Too Many Requests (RFC 6585); Docker Hub "toomanyrequests: You have reached '
        'your pull rate limit"; S3 SlowDown; corpus startup-003, external-services-011',
    ),
    Signature(
        rule="service-unavailable",
        family="external-services",
        pattern=_re(
            r"Internal Server Error|INTERNAL SERVER ERROR|Bad Gateway|Service Unavailable"
            r"|Service Temporarily Unavailable|Gateway Time-?out|50[0234] Server Error|HTTP Error 50[0234]"
            r"|HTTP 50[0234] "
            r"|We encountered an internal error\. Please try again|\(InternalError\) when calling the"
            r"|\(ServiceUnavailable\)|HTTP error 50[0234]|Backend Error|exceptions\.ServiceUnavailable"
            r"|exceptions\.InternalServerError"
            # curl (and git over https, which uses it): CURLE_HTTP_RETURNED_ERROR with the status
            r"|The requested URL returned error: 50[0234]"
            # botocore ClientError with a bare 5xx code. (Not urllib3's "too many 500 error
            # responses": its own retries already ran out on a server that kept failing,
            # e.g. a misconfigured tracking server in corpus external-services-026.)
            r"|An error occurred \(50[0234]\) when calling"
        ),
        retryable=True,
        error_code="SERVICE_UNAVAILABLE",
        message="A service answered with a server error",
        cause="A registry, model hub or object store had a server-side fault (HTTP 5xx); the request itself was valid.",
        next_step="The job is retried automatically. If the service stays down, check its status "
        "page or use a mirror/cache.",
        documented='HTTP 500/502/503/504 (RFC 9110); S3 InternalError "We encountered an internal error. '
        'Please try again."; curl CURLE_HTTP_RETURNED_ERROR ("The requested URL returned error: 503"); '
        'botocore ClientError "An error occurred (503) when calling the X operation"; corpus external-services-001, -003, -013, -040, '
        "startup-019, -042",
    ),
    Signature(
        rule="service-timeout",
        family="external-services",
        pattern=_re(
            r"Read timed out|RequestTimeout|TLS handshake timeout|i/o timeout|context deadline exceeded"
            r"|ReadTimeoutError|ConnectTimeoutError|operation timeout|Client\.Timeout exceeded"
            r"|request canceled while waiting for connection|exceptions\.DeadlineExceeded: 504"
            # huggingface_hub/transformers when the Hub cannot be reached and nothing is cached
            r"|Connection error, and we cannot find the requested files|We couldn't connect to '"
            # huggingface_hub's LocalEntryNotFoundError when the Hub did not answer and the file
            # is not cached (its class name also holds "EntryNotFoundError", a 404 below, so this
            # earlier entry decides the line)
            r"|make sure your Internet connection is on"
            # The same timeouts raised by the standard library and the async HTTP clients, at the
            # end of the traceback a download (pip, datasets, hub) died in: socket/ssl
            # ("socket.timeout: timed out", "TimeoutError: The read operation timed out"), httpx
            # and httpcore, aiohttp, fsspec. Without them the traceback is the generic exception.
            # ssl's read, write or handshake timing out: TimeoutError since Python 3.10, and
            # socket.timeout before it (the same exception under its old name)
            r"|socket\.timeout: timed out|(?:TimeoutError|socket\.timeout): The (?:read|write|handshake) operation timed out"
            r"|httpx\.(?:Read|Connect|Write|Pool)Timeout|httpcore\.(?:Read|Connect|Write|Pool)Timeout"
            r"|aiohttp\.client_exceptions\.ServerTimeoutError|FSTimeoutError"
            # Weights & Biases when its server does not answer wandb.init() in time
            r"|Run initialization has timed out after \d|Error communicating with wandb process"
        ),
        retryable=True,
        error_code="SERVICE_TIMEOUT",
        message="A request to a service timed out",
        cause="A download, upload or registry request timed out: the service or the network to "
        "it was slow or briefly unreachable.",
        next_step="The job is retried automatically. If it keeps happening, check the network "
        "path to the service or use a closer mirror.",
        documented='urllib3 ReadTimeoutError ("Read timed out"); Go net/http "TLS handshake timeout", '
        '"i/o timeout", "context deadline exceeded"; S3 RequestTimeout; transformers "Connection '
        'error, and we cannot find the requested files in the cached path"; huggingface_hub '
        'LocalEntryNotFoundError ("... make sure your Internet connection is on"); W&B wandb.init() '
        '"Run initialization has timed out after %s sec", InitStartError "Error communicating with wandb process" '
        "(corpus external-services-202: many users at once while W&B lagged); Python socket.timeout, "
        'socket.timeout\'s "The read operation timed out" before Python 3.10 (corpus startup-302: pip in a '
        "docker build, hail-is/hail#8390), "
        'ssl "The read operation timed out"; httpx/httpcore ReadTimeout, ConnectTimeout; aiohttp '
        "ServerTimeoutError; fsspec FSTimeoutError; corpus startup-024, -027, -038, external-services-019, "
        "-030, -037, -072 (unslothai/unsloth#2136: a hub read timeout that a retry gets past)",
    ),
    Signature(
        rule="service-denied",
        family="external-services",
        pattern=_re(
            r"40[134] Client Error|401 Unauthorized|403 Forbidden|404 Not Found|RepositoryNotFoundError"
            r"|GatedRepoError|EntryNotFoundError|RevisionNotFoundError|AccessDenied|Access Denied"
            r"|NoSuchBucket|NoSuchKey|InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken"
            r"|The requested URL returned error: 40[134]|An error occurred \(40[134]\) when calling"
            r"|HTTP Error 40[134]|NoCredentialsError|Unable to locate credentials"
        ),
        retryable=False,
        error_code="SERVICE_DENIED",
        message="A service refused the request (not found or not allowed)",
        cause="A model hub, object store or registry answered that the file does not exist or that "
        "the job may not read it (HTTP 401/403/404); a retry gets the same answer.",
        next_step="Check the name/path and the job's credentials or access token, then submit the job again.",
        documented="HTTP 401/403/404 (RFC 9110); huggingface_hub RepositoryNotFoundError/GatedRepoError; "
        'S3 AccessDenied/NoSuchKey; curl "The requested URL returned error: 404"; urllib '
        '"HTTP Error 403"; botocore "An error occurred (403)", NoCredentialsError',
    ),
    # Decision: not retryable. The HTTP client (requests/urllib3) got EAI_NONAME for the host
    # of the URL it was given: the DNS answered that the name does not exist. That is a
    # service address that is wrong or gone (a retired tracking server, a typo), which a
    # restart asks about again; a resolver that is down or slow answers EAI_AGAIN instead
    # ("[Errno -3] Temporary failure in name resolution"), which stays retryable. The job's
    # own peers starting late are the rendezvous entries below, not an HTTP URL.
    Signature(
        rule="service-host-unknown",
        family="external-services",
        pattern=_re(r"HTTPS?ConnectionPool\(host=[^\n]{0,600}?\[Errno -2\] Name or service not known"),
        retryable=False,
        error_code="SERVICE_HOST_UNKNOWN",
        message="A service's host name does not exist",
        cause="The job called a service (tracking server, model hub, store) at a host name that the "
        "DNS says does not exist, so the address is wrong or the service is gone.",
        next_step="Check the service's URL in the job's settings (or turn the integration off if the "
        "service was retired), then submit the job again.",
        documented='urllib3 NewConnectionError "Failed to establish a new connection: [Errno -2] Name or '
        'service not known" (glibc EAI_NONAME, vs EAI_AGAIN -3 for a resolver failure); corpus '
        "external-services-027 (MisterMap/undeepvo#66: the MLflow server no longer existed)",
    ),
    # ---- rendezvous and DNS start-up races ----------------------------------------
    Signature(
        rule="name-not-resolved",
        family="rendezvous",
        pattern=_re(
            r"Name or service not known|Could not resolve hostname|Could not resolve host"
            r"|nodename nor servname provided|No address associated with hostname|: no such host"
        ),
        retryable=True,
        error_code="NAME_NOT_RESOLVED",
        message="A host name did not resolve",
        cause="A host name the job uses did not resolve. Most often the workers started before "
        "the master's DNS record existed (Kubernetes creates it with or after the pod), which "
        "clears by itself; a wrong MASTER_ADDR, a name only the node itself knows or a missing "
        "DNS search domain fails the same way every time.",
        next_step="The job is retried; if the name still does not resolve on the next attempt, it is "
        "not retried again. Then use a host name every node can resolve (or the IP "
        "address) and check the pods' dnsPolicy.",
        # Decision (issue 13: "workers that start before the master's name resolves" clear by
        # themselves): retried, and the repeated-failure guard stops a name that never
        # resolves on its second failure. The corpus's sources split evenly: start-up races
        # (rendezvous-001, -003, -010, -026) and wrong names (rendezvous-004, -006, -018).
        documented='glibc gai_strerror(EAI_NONAME) "Name or service not known"; OpenSSH "Could not '
        'resolve hostname"; corpus rendezvous-001, -003, -026',
    ),
    Signature(
        rule="port-taken",
        family="rendezvous",
        pattern=_re(r"Failed to add port to server"),
        retryable=True,
        error_code="PORT_TAKEN",
        message="A gRPC server could not bind its port",
        cause="The port the job's coordinator needs was still held by another process on the "
        "node (often a previous job's leftover).",
        next_step="The job is retried automatically, preferably on another node.",
        explains_crash=True,
        documented='gRPC add_port.cc "Failed to add port to server"; corpus signals-011 (orphaned JAX '
        "coordinator held the port)",
    ),
    # ---- storage ------------------------------------------------------------------
    Signature(
        rule="stale-file-handle",
        family="storage",
        pattern=_re(r"Stale (?:NFS )?file handle"),
        retryable=True,
        error_code="ESTALE",
        message="Stale file handle on shared storage",
        cause="The network file system lost track of a file or directory the job had open "
        "(a server restart, failover or race on the storage side).",
        next_step="The job is retried automatically. If it keeps happening, ask an administrator "
        "to check the shared storage.",
        documented='Linux errno ESTALE (116) "Stale file handle"; corpus storage-009',
    ),
    # PyTorch's serializer (caffe2/serialize/inline_container.cc, PyTorchStreamWriter) reports
    # that writing the checkpoint failed, without saying why: a full disk or quota (what the
    # user must fix; it says nothing of "No space left on device") or the file system failing
    # for the moment. Not retried by the catalog; the reports go both ways, which makes it the
    # probe's to tell (core.kinds).
    Signature(
        rule="checkpoint-write-failed",
        family="storage",
        pattern=_re(r"PytorchStreamWriter failed writing file|inline_container\.cc:\d{1,6}\] \. unexpected pos \d"),
        retryable=False,
        error_code="CHECKPOINT_WRITE_FAILED",
        message="Writing the checkpoint failed",
        cause="torch.save could not write the checkpoint file: most often the disk or the quota is full, "
        "sometimes the shared file system failed for the moment.",
        next_step="Check the free space and quota where the checkpoints go (old checkpoints, another run's "
        "output); if there is room, the storage failed for the moment and a retry will tell.",
        documented='caffe2/serialize/inline_container.cc PyTorchStreamWriter::writeRecord ("PytorchStreamWriter '
        'failed writing file %s: file write failed", "unexpected pos %d vs %d"); corpus storage-004 (the '
        "output volume full), storage-019 (a Lustre/NFS write that succeeded on the second attempt)",
    ),
    Signature(
        rule="io-error",
        family="storage",
        pattern=_re(r"Input/output error"),
        retryable=True,
        error_code="EIO",
        message="Input/output error from storage",
        cause="Reading or writing a file failed in the storage layer (EIO), not in the program.",
        next_step="The job is retried automatically. If the same file fails every time, check the "
        "file and the storage it is on.",
        documented='Linux errno EIO (5) "Input/output error"; corpus storage-014',
    ),
    # ---- GPU and accelerator faults ------------------------------------------------
    Signature(
        rule="cuda-unknown-error",
        family="gpu",
        # NCCL reports the same CUDA status in its own words: "NCCL WARN Cuda failure 999
        # 'unknown error'" (transport/nvls.cc, enqueue.cc). Before CUDA 10.1 the runtime's
        # cudaErrorUnknown was 30, which PyTorch's and Torch7's THC printed as "cuda runtime
        # error (30) : unknown error" and "THCudaCheck FAIL ... error=30 : unknown error";
        # the driver API names it CUDA_ERROR_UNKNOWN (999).
        pattern=_re(
            r"CUDA error: unknown error|cudaErrorUnknown|cuda runtime error \((?:30|999)\)"
            r"|Cuda failure (?:999 )?'unknown error|error=(?:30|999) : unknown error|CUDA_ERROR_UNKNOWN"
        ),
        retryable=True,
        error_code="CUDA_UNKNOWN_ERROR",
        message="CUDA: unknown error",
        cause="The GPU or its driver failed in a way CUDA could not name, which points at the GPU.",
        next_step=_HARDWARE_NEXT,
        documented="CUDA runtime cudaErrorUnknown (999; 30 before CUDA 10.1), driver API CUDA_ERROR_UNKNOWN; "
        "PyTorch/Torch7 THC's 'cuda runtime error (%d) : %s' and 'THCudaCheck FAIL ... error=%d : %s'; "
        "corpus gpu-200 and gpu-201 (cleared by rebooting the machine), gpu-016 (BLOOM-176B: a GPU crashing "
        "from a hardware failure), gpu-031 (NVIDIA/nccl-tests#276: NCCL's 'Cuda failure 999', cleared "
        "by resetting the node's Fabric Manager and GPUs)",
    ),
    # torch_xla's cluster resolver (torch_xla/distributed/xla_dist.py, used by xla_dist and
    # xmp.spawn on TPU pods) checks the Cloud TPU's state before it starts the workers and
    # refuses a TPU that is still being created, repaired or restarted ("is not READY yet") or
    # whose health check fails ("is not HEALTHY yet"), telling to re-run when it is: the TPU's
    # state, not the program's.
    Signature(
        rule="tpu-not-ready",
        family="gpu",
        pattern=_re(r"TPU [^\n]{1,200}? is not (?:READY|HEALTHY) yet"),
        retryable=True,
        error_code="TPU_NOT_READY",
        message="The TPU was not ready or not healthy",
        cause="The Cloud TPU the job runs on was not ready (still being created, repaired or "
        "restarted) or failed its health check when the job started.",
        next_step=_HARDWARE_NEXT,
        documented='torch_xla/distributed/xla_dist.py ClusterResolver ("TPU {tpu_name} is not READY yet. '
        'Re-run when all TPUs are READY", "... is not HEALTHY yet. Re-run when all TPUs are HEALTHY"); '
        "corpus gpu-301 (pytorch/xla#2142: a TPU pod unhealthy after an interrupted run, gone with no change)",
    ),
    Signature(
        rule="device-busy",
        family="gpu",
        pattern=_re(r"Device or resource busy|busy or unavailable"),
        retryable=True,
        error_code="DEVICE_BUSY",
        message="The accelerator is busy or held by another process",
        cause="The GPU/TPU device was still held by another process on the node (often a "
        "previous job that did not exit cleanly).",
        next_step=_HARDWARE_NEXT,
        documented='Linux errno EBUSY (16) "Device or resource busy"; CUDA cudaErrorDevicesUnavailable '
        '("busy or unavailable"); corpus gpu-019',
    ),
    # ---- network configuration ----------------------------------------------------
    Signature(
        rule="nccl-no-socket-interface",
        family="network",
        pattern=_re(r"no socket interface found|No usable listening interface found"),
        retryable=False,
        error_code="NCCL_NO_INTERFACE",
        message="NCCL found no usable network interface",
        cause="NCCL could not find the network interface it was told to use (NCCL_SOCKET_IFNAME) "
        "or any usable one, a configuration problem of the job or the node.",
        next_step="Fix or remove NCCL_SOCKET_IFNAME (or the node's interface setup), then submit the job again.",
        documented='NCCL bootstrap "Bootstrap : no socket interface found", "NET/Socket : No usable listening '
        "interface found\" (no local interface in NCCL_COMM_ID's subnet); corpus network-004",
    ),
    # Decision: not retryable. NCCL's troubleshooting guide gives these two for an
    # InfiniBand setup that cannot pin (register) enough memory: the memlock limit of the
    # instance (ulimit -l, a container's default), fixed by the configuration, not by a rerun.
    Signature(
        rule="nccl-ib-memlock",
        family="network",
        pattern=_re(r"Call to ibv_(?:reg_mr|reg_mr_iova2|reg_dmabuf_mr|create_qp) failed"),
        retryable=False,
        error_code="NCCL_IB_MEMLOCK",
        message="NCCL could not register memory with the InfiniBand adapter",
        cause="NCCL could not pin memory for InfiniBand (or create its queue pairs), which NCCL's guide "
        "traces to the instance's locked-memory limit (ulimit -l) or the node's RDMA setup; every "
        "attempt fails the same way.",
        next_step="Give the instance an unlimited locked-memory limit (memlock, e.g. --ulimit memlock=-1 "
        "for docker) or ask an administrator to check GPUDirect RDMA, then submit the job again.",
        documented='NCCL docs, troubleshooting, InfiniBand: "NCCL WARN Call to ibv_reg_mr failed" / "Call to '
        'ibv_create_qp failed": "remove the user limits on registering pinned memory" (memlock unlimited); '
        "corpus network-015 (NVIDIA/nccl-tests#206: ulimit -l was 8192)",
    ),
    Signature(
        rule="evicted-node-pressure",
        family="preemption",
        pattern=_re(r"The node was low on resource|NodeNotReady|node\(s\) were unschedulable"),
        retryable=True,
        error_code="EVICTED",
        message="Evicted because the node ran short of resources",
        cause="The node ran short of memory or disk (or stopped being ready), so the kubelet "
        "evicted instances to protect it; this instance used no more than it requested.",
        next_step="The job is retried automatically when resources are free again.",
        explains_kill=True,
        documented='Kubernetes kubelet node-pressure eviction ("The node was low on resource: memory"), '
        "node condition NodeNotReady",
    ),
    Signature(
        rule="executable-not-found",
        family="startup",
        pattern=_re(r"executable file not found in \$PATH|no such file or directory: unknown"),
        retryable=False,
        error_code="EXECUTABLE_NOT_FOUND",
        message="The container's command does not exist in the image",
        cause="The container runtime could not start the command: it is not in the image (or not on PATH).",
        next_step="Check the command and the image (the program must be installed in it), then submit the job again.",
        documented='runc/containerd "OCI runtime create failed: ... executable file not found in $PATH"',
    ),
    # aws-ofi-nccl (EFA) failing to register a buffer is the same fault as ibv_reg_mr above
    # on another transport: the node's software stack or limits, not a flaky link.
    Signature(
        rule="nccl-ofi-register-failed",
        family="network",
        pattern=_re(r"NET/OFI Unable to register memory"),
        retryable=False,
        error_code="NCCL_OFI_REGISTER",
        message="NCCL's EFA/libfabric plugin could not register memory",
        cause="The libfabric (EFA) plugin of NCCL could not register a buffer with the adapter, which "
        "points at the node's software stack (a libfabric/EFA installer that does not match the "
        "NCCL version) or its locked-memory limit; every attempt fails the same way.",
        next_step="Upgrade the EFA installer / aws-ofi-nccl to versions that match NCCL (or follow the "
        "plugin's known-issue workaround) and give the instance an unlimited memlock, then "
        "submit the job again.",
        documented='aws-ofi-nccl src/nccl_ofi_rdma.cpp register_rail_mr_buffer ("NET/OFI Unable to register '
        'memory"); corpus network-014 (awslabs/awsome-distributed-ai#203: libfabric bug before EFA '
        "installer 1.29.1 with NCCL 2.19+)",
    ),
    # A peer sent more bytes than this rank posted: ranks that call NCCL inconsistently or
    # run with different NCCL settings (protocols, algorithms), per NCCL's maintainers; a
    # restart repeats the mismatch.
    Signature(
        rule="nccl-message-truncated",
        family="network",
        pattern=_re(r"NCCL WARN[^\n]{0,300}?[Mm]essage truncated"),
        retryable=False,
        error_code="NCCL_MESSAGE_TRUNCATED",
        message="NCCL: a peer's message was larger than expected",
        cause="A peer sent NCCL more data than this rank expected: the ranks are calling collectives "
        "inconsistently (different sizes or order) or run with different NCCL settings.",
        next_step="Make every rank call the same collectives with the same sizes and run every rank with "
        "the same NCCL_* environment, then submit the job again.",
        documented='NCCL src/transport/net_socket.cc ("NET/Socket : peer %s message truncated : receiving '
        '%d bytes instead of %d"); corpus network-017 (NVIDIA/nccl#626)',
    ),
    Signature(
        rule="tls-certificate-untrusted",
        family="external-services",
        pattern=_re(r"certificate signed by unknown authority|CERTIFICATE_VERIFY_FAILED"),
        retryable=False,
        error_code="TLS_UNTRUSTED",
        message="A service's TLS certificate is not trusted",
        cause="The node or image does not trust the certificate of a registry, hub or store "
        "(a private CA, a proxy), so every connection is refused the same way.",
        next_step="Add the CA certificate to the image or node (or fix the proxy), then submit the job again.",
        documented='Go crypto/x509 "certificate signed by unknown authority"; Python ssl CERTIFICATE_VERIFY_FAILED',
    ),
    Signature(
        rule="disk-quota-exceeded",
        family="storage",
        pattern=_re(r"Disk quota exceeded|EDQUOT"),
        retryable=False,
        error_code="EDQUOT",
        message="Disk quota exceeded",
        cause="The job's user or project reached its storage quota, which the next attempt hits again.",
        next_step="Free space in the quota (old checkpoints, caches) or ask for a larger one, then submit the job again.",
        documented='Linux errno EDQUOT (122) "Disk quota exceeded"',
    ),
    Signature(
        rule="read-only-file-system",
        family="storage",
        pattern=_re(r"Read-only file system"),
        retryable=False,
        error_code="EROFS",
        message="A path the job writes is on a read-only file system",
        cause="The job writes to a path that is mounted read-only, or that it may not write.",
        next_step="Write checkpoints and outputs to a writable mount, then submit the job again.",
        documented='Linux errno EROFS (30) "Read-only file system"; corpus storage-005',
    ),
    Signature(
        rule="mount-disconnected",
        family="storage",
        pattern=_re(r"Transport endpoint is not connected|Remote I/O error"),
        retryable=True,
        error_code="ENOTCONN",
        message="A mounted file system went away",
        cause="A network or FUSE mount the job uses stopped answering (its daemon restarted or the "
        "storage was unreachable).",
        next_step="The job is retried automatically. If it keeps happening, ask an administrator to check the mount.",
        documented='Linux errno ENOTCONN (107) "Transport endpoint is not connected" (FUSE), EREMOTEIO (121)',
    ),
    Signature(
        rule="shm-write-failed",
        family="storage",
        pattern=_re(r"unable to write to file </torch_"),
        retryable=False,
        error_code="SHM_WRITE_FAILED",
        message="Writing to shared memory (/dev/shm) failed",
        cause="Tensors shared between processes live in /dev/shm, and it is too small (Docker's default is 64 MB).",
        next_step="Give the container more shared memory (--ipc=host or --shm-size), or use fewer "
        "DataLoader workers, then submit the job again.",
        documented='torch THAllocator "unable to write to file </torch_...>"; corpus storage-003',
    ),
    Signature(
        rule="cuda-no-kernel-image",
        family="user-error",
        pattern=_re(r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice"),
        retryable=False,
        error_code="CUDA_NO_KERNEL_IMAGE",
        message="CUDA: the program was not built for this GPU",
        cause="The installed PyTorch/CUDA build has no code for this GPU's architecture.",
        next_step="Install a build that supports the GPU (or choose other GPUs), then submit the job again.",
        documented='CUDA runtime cudaErrorNoKernelImageForDevice ("no kernel image is available for execution on the device")',
    ),
    Signature(
        rule="cuda-kernel-fault",
        family="user-error",
        pattern=_re(r"an illegal instruction was encountered|misaligned address|cudaErrorMisalignedAddress"),
        retryable=False,
        error_code="CUDA_KERNEL_FAULT",
        message="CUDA: a GPU kernel faulted",
        cause="A GPU kernel executed an illegal instruction or a misaligned access, a bug in the "
        "kernel or a mismatch of compiled extensions.",
        next_step="Run with CUDA_LAUNCH_BLOCKING=1 to find the operation, and rebuild extensions for "
        "this torch/CUDA, then submit the job again.",
        documented="CUDA runtime cudaErrorIllegalInstruction, cudaErrorMisalignedAddress",
    ),
    Signature(
        rule="nvidia-driver-unreachable",
        family="gpu",
        pattern=_re(r"couldn't communicate with the NVIDIA driver"),
        retryable=False,
        error_code="NVIDIA_DRIVER_UNREACHABLE",
        message="The NVIDIA driver is not loaded on the node",
        cause="The node's NVIDIA kernel driver is not loaded or does not match (after a kernel or "
        "driver upgrade); no GPU program runs there until it is fixed.",
        next_step=_HARDWARE_NEXT,
        documented='nvidia-smi "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver"',
    ),
    Signature(
        rule="ib-transport-fault",
        family="network",
        pattern=_re(
            r"NET/IB ?: Got async event|[Tt]ransport retry count exceeded|IBV_WC_RETRY_EXC_ERR"
            r"|local catastrophic error"
        ),
        retryable=True,
        error_code="IB_FAULT",
        message="The InfiniBand fabric reported a fault",
        cause="The InfiniBand adapter or a link reported an error (a port went down, retries were "
        "exhausted), a fabric fault rather than the program.",
        next_step=_RETRY_COMM,
        documented='NCCL net_ib.cc "NET/IB : Got async event"; ibv_wc_status IBV_WC_RETRY_EXC_ERR (12) '
        '"transport retry counter exceeded"',
    ),
    Signature(
        rule="grpc-unreachable",
        family="network",
        pattern=_re(r"failed to connect to all addresses"),
        retryable=True,
        error_code="GRPC_UNREACHABLE",
        message="gRPC could not reach its peer",
        cause="A gRPC client (a coordinator, a parameter server) could not connect to any address "
        "of its peer: it was not up yet, had died, or the network failed.",
        next_step=_RETRY_COMM,
        documented='gRPC status UNAVAILABLE "failed to connect to all addresses"',
    ),
    Signature(
        rule="nan-detected",
        family="nan",
        pattern=_re(r"NaN or Inf found in input tensor|returned nan values in its"),
        retryable=False,
        error_code="LOSS_NAN",
        message="NaN or infinite values appeared in training",
        cause=_NAN_CAUSE,
        next_step=_NAN_NEXT,
        documented="torch.autograd anomaly mode (\"Function 'X' returned nan values in its 0th output\"); "
        'torch clip_grad/Megatron "NaN or Inf found in input tensor"',
    ),
    Signature(
        rule="pod-sandbox-failed",
        family="startup",
        pattern=_re(r"Failed to create pod sandbox|FailedCreatePodSandBox|failed to setup network for sandbox"),
        retryable=True,
        error_code="POD_SANDBOX_FAILED",
        message="The node could not set up the pod's sandbox",
        cause="The node's container runtime or network plugin failed to set up the pod (its sandbox "
        "or network), a node-side hiccup rather than the job.",
        next_step=_HARDWARE_NEXT,
        documented='Kubernetes kubelet event FailedCreatePodSandBox ("Failed to create pod sandbox")',
    ),
    Signature(
        rule="connection-dropped",
        family="external-services",
        pattern=_re(
            r"Remote end closed connection without response|Connection aborted\.|IncompleteRead"
            r"|ChunkedEncodingError|EOF occurred in violation of protocol|SSLEOFError"
            r"|HTTP 000 CONNECTION FAILED|Connection broken: |GnuTLS recv error|RPC failed; curl \d"
            r"|Could not connect to the endpoint URL"
            # Winsock's WSAECONNABORTED (10053): the local stack gave up on the connection
            r"|An established connection was aborted by the software in your host machine"
            # aiohttp (datasets' streaming, fsspec's HTTP file system): the server went away
            r"|aiohttp\.client_exceptions\.(?:ServerDisconnectedError|ClientPayloadError|ClientOSError)"
        ),
        retryable=True,
        error_code="CONNECTION_DROPPED",
        message="A connection to a service dropped mid-request",
        cause="A service (hub, index, store) closed the connection in the middle of a request or "
        "download, or could not be reached at all for the moment.",
        next_step="The job is retried automatically. If it keeps happening, check the network path "
        "to the service or use a mirror/cache.",
        documented='http.client RemoteDisconnected; urllib3 ProtocolError ("Connection aborted."), '
        'IncompleteRead, "Connection broken: ..."; requests ChunkedEncodingError; ssl SSLEOFError; conda '
        '"HTTP 000 CONNECTION FAILED"; git/curl "GnuTLS recv error", "RPC failed; curl 56"; '
        'botocore EndpointConnectionError ("Could not connect to the endpoint URL"); aiohttp '
        "ServerDisconnectedError, ClientPayloadError, ClientOSError (huggingface/datasets#2605: 'This "
        "error must trigger a retry instead of directly crashing'); corpus external-services-069, -070",
    ),
    Signature(
        rule="service-connection-eof",
        family="external-services",
        pattern=_re(r"(?:Get|Head|Post|Put) \"?https?://[^\s\"]{1,400}\"?: (?:unexpected )?EOF\b"),
        retryable=True,
        error_code="CONNECTION_DROPPED",
        message="A registry or service closed the connection without answering",
        cause="A registry or service (seen by a Go client: docker, containerd, kubelet) closed the "
        "connection before it sent a response, a hiccup of the service or a proxy in between.",
        next_step="The job is retried automatically. If it keeps happening, check the service's status "
        "page and any proxy between the nodes and it.",
        documented='Go net/http url.Error wrapping io.EOF ("Get \\"https://quay.io/v2/\\": EOF": the server '
        "closed the connection before responding); corpus startup-044 (a quay.io incident)",
    ),
    Signature(
        rule="store-barrier-timeout",
        family="rendezvous",
        pattern=_re(r"Timed out initializing process group in store based barrier"),
        retryable=True,
        error_code="STORE_BARRIER_TIMEOUT",
        message="Not every rank joined the process group in time",
        cause="While the process group was being created, some rank did not arrive in time: it "
        "started late, died or could not reach the master.",
        next_step=_RETRY_COMM,
        cascade_like=True,
        documented='torch/distributed/distributed_c10d.py _store_based_barrier ("Timed out initializing '
        'process group in store based barrier")',
    ),
    Signature(
        rule="too-many-open-files",
        family="storage",
        pattern=_re(r"Too many open files"),
        retryable=False,
        error_code="EMFILE",
        message="Too many open files",
        cause="The program opened more files than the instance's limit allows (ulimit -n), "
        "often through many DataLoader workers or file-system sharing.",
        next_step="Raise the open-file limit, or use fewer DataLoader workers or "
        'torch.multiprocessing.set_sharing_strategy("file_system"), then submit the job again.',
        documented='Linux errno EMFILE (24) "Too many open files"',
    ),
    Signature(
        rule="nvlink-error",
        family="gpu",
        pattern=_re(r"NVLink error|uncorrectable NVLink|NVLINK error"),
        retryable=True,
        error_code="NVLINK_ERROR",
        message="An NVLink error between GPUs",
        cause="An NVLink connection between GPUs reported an error, a hardware fault of the node.",
        next_step=_HARDWARE_NEXT,
        documented='CUDA cudaErrorNvlinkUncorrectable ("uncorrectable NVLink error was detected"); NVIDIA Xid 74',
    ),
    Signature(
        rule="grpc-connection-lost",
        family="network",
        pattern=_re(r"GOAWAY|keepalive watchdog timeout|Stream removed"),
        retryable=True,
        error_code="GRPC_CONNECTION_LOST",
        message="A gRPC connection was lost",
        cause="A gRPC connection to a peer or coordinator was closed by the other side or timed "
        "out (keepalive), because the peer went away or the network failed.",
        next_step=_RETRY_COMM,
        documented='gRPC HTTP/2 GOAWAY, "keepalive watchdog timeout", "Stream removed"',
    ),
    # After the specific gRPC lines above (a GOAWAY says more on the same line). Not XLA's
    # coordination service "UNAVAILABLE: Task ... heartbeat timeout", which is a task that
    # stopped answering for any reason (corpus network-006: a too-short heartbeat timeout).
    Signature(
        rule="grpc-unavailable",
        family="network",
        pattern=_re(r"StatusCode\.UNAVAILABLE|errors_impl\.UnavailableError"),
        retryable=True,
        error_code="GRPC_UNAVAILABLE",
        message="gRPC: the peer was unavailable",
        cause="A gRPC call to a peer or coordinator failed with UNAVAILABLE: the peer was not up, had "
        "gone away, or the network to it failed for the moment.",
        next_step=_RETRY_COMM,
        documented='gRPC status codes (grpc.io/docs/guides/status-codes: UNAVAILABLE "is most likely a '
        'transient condition, which can be corrected by retrying with a backoff"); grpc-python '
        "StatusCode.UNAVAILABLE; tensorflow errors_impl.UnavailableError",
    ),
    # ---- the program itself: not retryable ----------------------------------------
    # Issue 26's fifth round: failures a restart does not fix that fell to the fallbacks (the
    # bare exit code, the generic exception), written from what the program or library prints
    # in its own words. They sit after every infrastructure signature above, so on the same line
    # a network, hardware or storage reading wins, and before the import and generic ones, so a
    # more precise reading of the same line wins over theirs.
    #
    # A command-line parser that rejects the arguments: argparse prints its usage and then
    # "<prog>: error: <message>" and exits 2, with these messages (CPython Lib/argparse.py); click
    # prints "Error: <message>" after its usage; absl's flags "FATAL Flags parsing error"; and
    # Hugging Face's HfArgumentParser raises on arguments no dataclass declares. Not another tool's
    # "<name>: error:" line without argparse's words (Slurm's "srun: error: Task launch ... failed"
    # and "sbatch: error: Slurm temporarily unable to accept job" are the scheduler's, and often
    # clear; corpus startup-403's "slurm_load_jobs error: Socket timed out" cleared).
    Signature(
        rule="arguments-rejected",
        family="user-error",
        pattern=_re(
            r"(?m)^"
            + _PREFIX
            + r"(?:[^\n:]{1,120}: error: (?:unrecognized arguments: |the following arguments are required: "
            r"|argument [^\n]{1,200}?: (?:invalid [^\n]{1,40}?value: |invalid choice: |expected (?:one|at least one|at most one|\d{1,3}) "
            r"argument|not allowed with argument |ignored explicit argument )|ambiguous option: "
            r"|one of the arguments [^\n]{1,200}? is required)"
            r"|Error: (?:[Nn]o such option: |Missing (?:option|argument|parameter) |Invalid value for "
            r"|Got unexpected extra arguments? ))"
            r"|FATAL Flags parsing error: |Some specified arguments are not used by the HfArgumentParser"
        ),
        retryable=False,
        error_code="ARGUMENTS_REJECTED",
        message="The program's arguments were rejected",
        cause="The program's command-line parser (argparse, click, absl flags or HfArgumentParser) rejected "
        "the arguments the instance was started with: an option the script does not declare, a required "
        "one missing, or a value it does not accept. Every attempt is started with the same arguments and "
        "fails the same way.",
        next_step="Make the job's command match the arguments the script declares (the usage line above the "
        "error lists them) and submit the job again. A launcher that passes its own option (the old "
        "torch.distributed.launch's --local-rank / --local_rank) needs the script to accept it, or the "
        "script can read LOCAL_RANK from the environment and be started with torchrun.",
        documented="CPython Lib/argparse.py (ArgumentParser.error: usage, then '%(prog)s: error: %(message)s', exit 2; "
        "'unrecognized arguments: %s', 'the following arguments are required: %s', 'argument %s: invalid "
        "choice: ...'); click exceptions.py (NoSuchOption 'No such option: {name}', MissingParameter, BadParameter "
        "'Invalid value for {param_hint}: ...', shown as 'Error: ...'); absl flags ('FATAL Flags parsing error: "
        "...'); transformers HfArgumentParser; corpus user-error-033, -034, -400, -401, -403, -404",
    ),
    # A configuration that the program's config system rejects: Hydra and OmegaConf name the key
    # ("Could not override 'trainer.gpus'.", "Key 'gpus' is not in struct", "Missing mandatory
    # value: model.name"), and PyYAML says where the file does not parse ("mapping values are not
    # allowed here", "found character '\t' that cannot start any token", printed with or without
    # its class: yaml.scanner.ScannerError). Not Hydra's "Error executing job with overrides",
    # which precedes any exception of the job (a download that timed out as well), nor JSON that
    # does not decode: a service that answered an error page while it was down reads the same
    # ("Expecting value: line 1 column 1", corpus external-services-405, retryable).
    Signature(
        rule="config-invalid",
        family="user-error",
        pattern=_re(
            r"Key '[^'\n]{1,200}' (?:is not in struct|not in '[^'\n]{1,200}')|Could not override '[^'\n]{1,300}'"
            r"|Could not append to config\. An item is already at|Missing mandatory value: |Error (?:parsing|merging) override"
            r"|Cannot find primary config '|In '[^'\n]{1,200}': Could not find '"
            r"|mapping values are not allowed here|found character '\\t' that cannot start any token"
            r"|could not find expected ':'|did not find expected key|expected <block end>, but found"
            r"|found undefined alias|found unknown escape character"
        ),
        retryable=False,
        error_code="CONFIG_INVALID",
        message="The job's configuration was rejected",
        cause="The configuration the program loads was rejected: a Hydra/OmegaConf key it does not have or a "
        "mandatory value left unset (often from a command-line override), or a YAML file that does not parse. "
        "It is read the same way on every attempt.",
        next_step="Fix the key or value the line names in the config file or the override (Hydra adds a key "
        "the config does not have with '+key=value'), or the YAML syntax at the line and column it gives "
        "(tabs are not allowed for indentation), then submit the job again.",
        documented="omegaconf errors (ConfigAttributeError/ConfigKeyError \"Key '%s' is not in struct\", "
        "MissingMandatoryValue 'Missing mandatory value: %s'); hydra ConfigCompositionException (\"Could not "
        "override '%s'.\", 'Error merging override', 'Error parsing override'); PyYAML scanner/parser errors; "
        "corpus user-error-030, -406, -408, -416",
    ),
    # pip's resolver with an answer from the index: the versions pinned conflict
    # (ResolutionImpossible), or the index lists versions and none satisfies the requirement;
    # conda's and mamba's solvers likewise. Not "(from versions: none)" nor old pip's "(from
    # versions: )" or "No distributions at all found": an index that answered nothing (a CDN
    # answering empty pages, a proxy, an outage) reads the same as a package it does not have
    # (corpus external-services-403, retryable, and -023, not).
    Signature(
        rule="package-resolution-failed",
        family="external-services",
        pattern=_re(
            # pip's closing "ERROR: ResolutionImpossible: for help visit <url>" says less than the line
            # above it that names the requirements in conflict, which then decides (the later line wins)
            r"ResolutionImpossible(?!: for help visit)|because these package versions have conflicting dependencies"
            r"|Could not find a version that satisfies the requirement [^\n]{1,300}?\(from versions: (?!none\))[^)\n]"
            r"|requires a different Python: |PackagesNotFoundError: |PackageNotFoundError: Package missing in current"
            r"|UnsatisfiableError: |ResolvePackageNotFound: |Could not solve for environment specs"
        ),
        retryable=False,
        error_code="PACKAGE_RESOLUTION_FAILED",
        message="The packages could not be installed",
        cause="The package manager reached its index but could not satisfy the requirements: pinned versions "
        "that conflict, a version the index does not have for this Python or platform, or a package the "
        "configured channels do not carry. The same requirements fail the same way on every attempt.",
        next_step="Change the requirements the message names: align or loosen the conflicting pins, pick a "
        "version the index lists, use a Python version the package supports, or add the channel that has it "
        "(conda-forge, pytorch), then submit the job again.",
        documented="pip's resolver (resolvelib ResolutionImpossible; 'Cannot install ... because these package "
        "versions have conflicting dependencies'; 'Could not find a version that satisfies the requirement %s "
        "(from versions: %s)'); conda PackagesNotFoundError, UnsatisfiableError, ResolvePackageNotFound; corpus "
        "external-services-022, -400, -401, -408",
    ),
    # cuDNN's and cuBLAS's statuses for a call whose parameters they do not accept: a programming
    # error (shapes, strides, dtypes, a non-contiguous input, a batch over a kernel's limit), not
    # the device. Not EXECUTION_FAILED, INTERNAL_ERROR or ALLOC_FAILED, which a faulty GPU or the
    # memory running out also give.
    Signature(
        rule="cuda-library-rejected-call",
        family="user-error",
        pattern=_re(
            r"CUDNN_STATUS_(?:BAD_PARAM|NOT_SUPPORTED|ARCH_MISMATCH)|CUBLAS_STATUS_(?:INVALID_VALUE|NOT_SUPPORTED|ARCH_MISMATCH)"
        ),
        retryable=False,
        error_code="CUDA_LIBRARY_REJECTED_CALL",
        message="cuDNN/cuBLAS rejected the call's parameters",
        cause="cuDNN or cuBLAS refused an operation's parameters (BAD_PARAM, NOT_SUPPORTED, INVALID_VALUE, "
        "ARCH_MISMATCH): shapes, strides, data types or a memory layout the library does not accept, or a "
        "library built for another GPU. The same operation fails the same way on every attempt.",
        next_step="Check the operation the log names: its input shapes and dtypes, that its inputs are "
        "contiguous, a batch too large for the kernel (split it), and that cuDNN/cuBLAS match the GPU and "
        "torch's CUDA (torch.backends.cudnn.enabled=False tells a cuDNN limit apart); fix it and submit the "
        "job again.",
        documented="cuDNN API reference (cudnnStatus_t: CUDNN_STATUS_BAD_PARAM 'an incorrect value or parameter "
        "was passed', NOT_SUPPORTED, ARCH_MISMATCH); cuBLAS cublasStatus_t INVALID_VALUE; corpus gpu-400, gpu-401",
    ),
    # Shapes, dtypes and devices that do not fit, in PyTorch's words: a checkpoint saved from
    # another configuration of the model (load_state_dict's "size mismatch for ...: copying a param
    # with shape ... from checkpoint"), operands whose shapes or devices differ, a view that the
    # data cannot fill. Printed with or without a traceback ("Error: size mismatch for ..." by a
    # wrapper, "what():  shape '[..]' is invalid" by libtorch).
    Signature(
        rule="shape-mismatch",
        family="user-error",
        pattern=_re(
            r"size mismatch for [^\n]{1,300}?: copying a param with shape|Error\(s\) in loading state_dict for "
            r"|Expected all tensors to be on the same device|mat1 and mat2 shapes cannot be multiplied"
            r"|The size of tensor a \(\d{1,12}\) must match the size of tensor b|shape '\[[^\]\n]{0,200}\]' is invalid for input of size"
            r"|expected scalar type \w{1,40} but found \w{1,40}"
        ),
        retryable=False,
        error_code="SHAPE_MISMATCH",
        message="Tensor shapes, devices or types do not match",
        cause="The model and what it is given do not fit: a checkpoint saved from another model configuration, "
        "operands of incompatible shapes or data types, or tensors on different devices. It follows from the "
        "code, the config and the checkpoint, so every attempt fails at the same place.",
        next_step="Make the model's configuration match the checkpoint (the message gives both shapes), or fix "
        "the shapes, dtypes or devices it names (move inputs to the model's device), then submit the job again.",
        documented="PyTorch Module.load_state_dict ('size mismatch for {}: copying a param with shape {} from "
        "checkpoint, the shape in current model is {}'), ATen shape and device checks; corpus user-error-006, "
        "-007, -009, -010, -011, -409, -410",
    ),
    # Collectives that the ranks do not agree on, as PyTorch's debug mode
    # (TORCH_DISTRIBUTED_DEBUG=DETAIL) and NCCL's own check name them: the program's ranks call
    # different collectives, or with tensors of different sizes; a restart repeats it.
    Signature(
        rule="collective-mismatch",
        family="collective-timeout",
        pattern=_re(r"Detected mismatch between collectives on ranks|Mismatched collective detected"),
        retryable=False,
        error_code="COLLECTIVE_MISMATCH",
        message="The ranks called mismatched collectives",
        cause="The ranks of the job called different collective operations, or the same one with tensors of "
        "different shapes or types, so they cannot complete it: the program takes different paths on "
        "different ranks, which a restart repeats.",
        next_step="Make every rank call the same collectives in the same order with the same shapes (look for "
        "code that only some ranks run, or data-dependent shapes), using the ranks and operations the message "
        "names, then submit the job again.",
        documented="torch/csrc/distributed/c10d ProcessGroupWrapper ('Detected mismatch between collectives on "
        "ranks'); NCCL 'Mismatched collective detected, please check your collective calls'; corpus "
        "collective-timeout-003, -018, -020",
    ),
    # A compiled extension loaded against libraries it was not built for: the dynamic linker's
    # "undefined symbol" (a C++ extension built for another torch, most often), the C++ runtime or
    # glibc too old for the binary, NumPy's 1.x/2.x ABI. Before the import error, whose line it
    # often is ("ImportError: ...so: undefined symbol: _ZN3c10..."): the fix is a rebuild.
    Signature(
        rule="extension-abi-mismatch",
        family="user-error",
        pattern=_re(
            # not on a warning's line: torchvision warns "Failed to load image Python extension: ...
            # image.so: undefined symbol: ..." at import and runs on without its image functions
            r"(?m)^(?![^\n]{0,1000}?(?i:warn))[^\n]{0,1000}?undefined symbol: \S"
            r"|version `(?:GLIBCXX|GLIBC|CXXABI)_[\d.]{1,12}' not found"
            r"|compiled using NumPy 1\.x cannot be run in|module compiled against (?:ABI|API) version"
            r"|detected CUDA version \([^)\n]{1,20}\) mismatches the version that was used to compile PyTorch"
        ),
        retryable=False,
        error_code="EXTENSION_ABI_MISMATCH",
        message="A compiled extension does not match the installed libraries",
        cause="A compiled module (a PyTorch C++/CUDA extension or a binary wheel) was built against other "
        "versions of torch, CUDA, the C++ runtime or NumPy than the ones installed, so a symbol it needs is "
        "missing. Every attempt loads the same files.",
        next_step="Rebuild or reinstall the extension against the installed torch (pip install --no-cache-dir "
        "--force-reinstall, or the wheel built for this torch and CUDA), or install the torch version it was "
        "built for; make sure only one torch is on the library path, then submit the job again.",
        documented="glibc ld.so ('undefined symbol: %s', \"version `%s' not found\"); NumPy 2 ABI message; "
        "torch.utils.cpp_extension CUDA version check; corpus user-error-018, -413",
    ),
    # Building a C++/CUDA extension that fails: nvcc that does not know the architecture it is
    # asked for, a compiler's command that failed (setuptools' "error: command '/usr/bin/nvcc'
    # failed with exit status 1"), ninja's stop, torch's own build error. The same build fails the
    # same way. Not another command that failed during a build ("error: command 'git' failed ..."),
    # which may be a download: the line before it says why.
    Signature(
        rule="extension-build-failed",
        family="startup",
        pattern=_re(
            r"nvcc fatal[ \t]{0,8}: "
            r"|error: command '(?:[^'\n]{0,200}/)?(?:nvcc|gcc|g\+\+|c\+\+|cc|clang\+{0,2}|x86_64-linux-gnu-g(?:cc|\+\+)|cl\.exe)"
            r"(?:-\d{1,3})?' failed with exit (?:status|code) \d"
            r"|ninja: build stopped: subcommand failed|Error (?:compiling objects|building extension) for extension"
            r"|Error building extension '"
        ),
        retryable=False,
        error_code="EXTENSION_BUILD_FAILED",
        message="Building a compiled extension failed",
        cause="Compiling a C++/CUDA extension failed: the compiler rejected the code or its flags (an nvcc "
        "too old for the GPU architecture asked for, a compiler or headers that do not match torch). The "
        "same build fails the same way on every attempt.",
        next_step="Read the compiler's first error above this line; match the CUDA toolkit (nvcc) to the GPU "
        "and to torch's CUDA version, or set TORCH_CUDA_ARCH_LIST to architectures the toolkit supports, "
        "install the missing compiler or headers, then submit the job again.",
        documented="nvcc ('nvcc fatal   : Unsupported gpu architecture'); setuptools/distutils (\"error: command "
        "'%s' failed with exit code %d\"); torch.utils.cpp_extension ('Error building extension', 'Error "
        "compiling objects for extension'); corpus startup-400",
    ),
    # The CPU met an instruction it does not have: a binary built for newer CPUs (TensorFlow's
    # wheels need AVX from 1.6 on, PyTorch's some builds need AVX2) on an older one. The shell's
    # report of SIGILL, zsh's, faulthandler's and mpirun's ("exited on signal 4 (Illegal
    # instruction)"); not CUDA's "an illegal instruction was encountered" (a GPU kernel's,
    # cuda-kernel-fault).
    Signature(
        rule="illegal-instruction",
        family="signals",
        pattern=_re(
            r"(?m)Illegal instruction(?:[ \t]{1,24}\(core dumped\)|[ \t]*$)|illegal hardware instruction"
            r"|Fatal Python error: Illegal instruction|on signal 4 \(Illegal instruction\)"
        ),
        retryable=False,
        error_code="SIGILL",
        message="Illegal instruction: the program was built for another CPU",
        cause="The CPU met an instruction it does not support: the program or a library in it (a prebuilt "
        "TensorFlow or PyTorch wheel) was built for newer CPUs (AVX, AVX2, AVX-512) than this node's, so it "
        "crashes on every attempt on such a node.",
        next_step="Install a build for this CPU (an older release, or one built from source), or run on nodes "
        "whose CPUs have the instructions (the flags in /proc/cpuinfo), then submit the job again.",
        documented="POSIX SIGILL, bash/zsh termination reports ('Illegal instruction (core dumped)', 'illegal "
        "hardware instruction'); Open MPI's mpirun ('exited on signal 4 (Illegal instruction)'); TensorFlow 1.6 "
        "release notes (prebuilt binaries use AVX); corpus signals-203, signals-401, signals-403, signals-404",
    ),
    # Native code that aborted on its own check or exception: the message of an uncaught C++
    # exception (libstdc++ prints "terminate called after throwing an instance of 'T'" and then
    # "  what():  <message>"; libc++ "terminating (with|due to) uncaught exception of type T:
    # <message>"), a failed assert() ("file:line: func: Assertion `cond' failed.") or a glog CHECK
    # ("Check failed: a <= b (0 vs. -1.19e-07)"). The what() line, not the terminate line: alone,
    # "terminate called after throwing an instance of 'c10::DistBackendError'" only says that an
    # exception was not caught, and the line above it (a watchdog's timeout, an NCCL error) says
    # which. Where the message names a known fault (NCCL, a connection, a shape), that reading
    # decides: it is on the same line and earlier in the catalog. Not the c10d watchdog's report of
    # a communicator's failure ("Process group watchdog thread terminated with exception: ..."),
    # whatever its cause, nor EAGAIN's "Resource temporarily unavailable" (std::system_error when a
    # thread could not be started: the node's process limit, which other jobs share), nor a CHECK on a runtime status that a device, the memory or a peer also
    # gives (cuDNN's EXECUTION_FAILED and INTERNAL_ERROR, out of memory, CUDA's unknown error; the
    # absl/gRPC codes UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED and RESOURCE_EXHAUSTED, which gRPC
    # documents as retryable).
    Signature(
        rule="native-abort",
        family="user-error",
        pattern=_re(
            r"(?m)^"
            + _PREFIX
            + r"[ \t]{0,12}what\(\):[ \t](?![^\n]{0,300}?(?:watchdog thread terminated|Resource temporarily unavailable))"
            r"|terminating (?:with|due to) uncaught exception of type (?![^\n]{0,300}?Resource temporarily unavailable)[^\n]{1,300}"
            r"|Assertion `[^\n]{1,400}?[`'] failed"
            r"|Check failed: (?![^\n]{0,300}?(?:EXECUTION_FAILED|INTERNAL_ERROR|ALLOC_FAILED|out of memory|unknown error"
            r"|UNAVAILABLE|DEADLINE_EXCEEDED|ABORTED|RESOURCE_EXHAUSTED))"
        ),
        retryable=False,
        error_code="NATIVE_ABORT",
        message="The program aborted in native code",
        cause="Native code in the program or a library (C++, CUDA, a compiled extension) threw an exception "
        "nobody caught, or failed an assertion or a CHECK, and the process aborted. With the same code, "
        "versions and inputs it fails the same way on the next attempt.",
        next_step="Read the exception's message (the what() line) or the failed check: most often a shape, "
        "type or configuration the native code does not accept, or a library built for other versions (match "
        "torch, CUDA and compiled extensions). Fix it and submit the job again; if the message names a "
        "passing network or hardware fault, add that line as a retryable keyword.",
        documented="libstdc++ verbose terminate handler ('terminate called after throwing an instance of', "
        "then 'what():  %s'); libc++abi ('terminating with uncaught exception of type'); glibc assert ('Assertion `%s' "
        "failed.'); glog CHECK ('Check failed: '); corpus gpu-400, user-error-409, -410 (whose what() lines a finer "
        "signature reads)",
    ),
    Signature(
        rule="python-import-error",
        family="user-error",
        pattern=_re(r"(?m)^" + _PREFIX + r"(?P<exc>ModuleNotFoundError|ImportError): (?P<detail>[^\n]{0,200})"),
        retryable=False,
        error_code="IMPORT_ERROR",
        message="{exc}: {detail}",
        cause="A Python module or name the program imports is missing from the image or environment.",
        next_step="Install the missing package in the image or environment (or fix the import), "
        "then submit the job again.",
        documented="Python built-in exceptions ImportError, ModuleNotFoundError",
    ),
    Signature(
        rule="python-syntax-error",
        family="user-error",
        pattern=_re(r"(?m)^" + _PREFIX + r"(?P<exc>SyntaxError|IndentationError|TabError): (?P<detail>[^\n]{0,200})"),
        retryable=False,
        error_code="SYNTAX_ERROR",
        message="{exc}: {detail}",
        cause="The program's code has a syntax error, so Python could not run it.",
        next_step=_FIX_CODE,
        documented="Python built-in exceptions SyntaxError, IndentationError, TabError",
    ),
    Signature(
        rule="file-not-found",
        family="user-error",
        pattern=_re(r"FileNotFoundError|No such file or directory|can't open file"),
        retryable=False,
        error_code="FILE_NOT_FOUND",
        message="A file the program needs was not found",
        cause="A file or directory the program reads (script, data, checkpoint) does not exist on the instance.",
        next_step="Check the path in the command and settings and that the storage holding it is "
        "mounted, then submit the job again.",
        documented="Linux errno ENOENT (2), strerror text; Python FileNotFoundError",
    ),
    Signature(
        rule="command-not-found",
        family="user-error",
        pattern=_re(r"command not found|sh: (?:line )?\d{1,6}: [^\n]{0,300}?: not found"),
        retryable=False,
        error_code="COMMAND_NOT_FOUND",
        message="The command was not found",
        cause="The command to run does not exist on the instance (exit code 127).",
        next_step="Check the spelling of the command and that the program is installed in the "
        "image or on PATH, then submit the job again.",
        documented='bash/dash ("command not found", "sh: 1: x: not found"), POSIX exit status 127',
    ),
    Signature(
        rule="exec-format-error",
        family="startup",
        pattern=_re(r"exec format error", _I),
        retryable=False,
        error_code="EXEC_FORMAT_ERROR",
        message="exec format error: the program cannot run on this CPU",
        cause="The program or image was built for another CPU architecture (e.g. arm64 on an x86-64 node).",
        next_step="Use an image or binary built for the node's CPU, or choose other resources.",
        documented='Linux errno ENOEXEC (8) "Exec format error"; PAI-EAS FAQ "fork/exec /bin/sh: exec format error"',
    ),
    Signature(
        rule="permission-denied",
        family="user-error",
        pattern=_re(r"Permission denied"),
        retryable=False,
        error_code="PERMISSION_DENIED",
        message="Permission denied",
        cause="The program lacks permission to run a file or to read or write a path (exit code "
        "126 when the command itself is not executable).",
        next_step="If the console runs as root, the job runs as VIGIL_LOCAL_RUN_AS (default nobody) or "
        "its workspace's run_as, who must be able to reach the program and the paths it uses: set "
        "VIGIL_LOCAL_RUN_AS to a user who can, or VIGIL_LOCAL_ALLOW_ROOT=1 on a single-user machine. "
        "Otherwise give the script the execute bit or run it through its interpreter, and check the "
        "permissions of the paths it uses.",
        documented="Linux errno EACCES (13), strerror text; POSIX exit status 126",
    ),
    # Decision: a full disk is not retryable: the files that filled it are written again
    # by the next attempt, as in the FAQ's example of model files filling the system disk.
    Signature(
        rule="disk-full",
        family="storage",
        # Ignoring case: Go programs (docker's layer extraction, containerd) print the same errno
        # text lower-cased ("write /usr/local/...: no space left on device", corpus startup-206).
        pattern=_re(r"No space left on device|StorageFull", _I),
        retryable=False,
        error_code="ENOSPC",
        message="Disk full: No space left on device",
        cause="The instance's disk is full, e.g. too many model files or checkpoints.",
        next_step="Enlarge the disk, clean up old checkpoints, or keep large files on mounted "
        "external storage, then submit the job again.",
        documented="Linux errno ENOSPC (28), strerror text; PAI-EAS FAQ IoError StorageFull; corpus startup-206",
    ),
    Signature(
        rule="loss-is-nan",
        family="nan",
        pattern=_re(
            r"Loss became infinite or NaN|Minimum loss scale reached"
            # DeepSpeed's dynamic loss scaler when fp16 keeps overflowing at its minimum scale
            r"|Current loss scale already at minimum",
            _I,
        ),
        retryable=False,
        error_code="LOSS_NAN",
        message="The training loss became NaN or infinite",
        cause=_NAN_CAUSE,
        next_step=_NAN_NEXT,
        documented='detectron2 FloatingPointError "Loss became infinite or NaN"; fairseq "Minimum loss scale reached"; '
        'DeepSpeed runtime/fp16/loss_scaler.py ("Current loss scale already at minimum - cannot decrease scale anymore. '
        'Exiting run."), corpus nan-016, nan-017',
    ),
    # "loss" (not the end of a longer word), then up to 40 characters without "=" or ":" (so
    # the value is the loss's own, not a later field's), then "=", ":", "is" or "became" and
    # nan/inf. The lookbehind comes after the literal so the scan can jump from one "loss" to
    # the next instead of trying the pattern at every position of a long progress log.
    Signature(
        rule="loss-value-nan",
        family="nan",
        pattern=_re(r"loss(?<![a-z]loss)[^\n=:]{0,40}(?:[=:]|\bis\b|\bbecame\b)[ \t]*(?:nan|inf)\b", _I),
        retryable=False,
        error_code="LOSS_NAN",
        message="The training loss became NaN or infinite",
        cause=_NAN_CAUSE,
        next_step=_NAN_NEXT,
        documented='training loops\' progress lines ("loss: nan", "loss = inf", "Loss is nan, stopping training")',
    ),
    # ---- generic: an uncaught Python exception in user code ------------------------
    # Any specific entry found anywhere in the tail wins over this one.
    Signature(
        rule="python-exception",
        family="user-error",
        pattern=_re(
            r"(?m)^"
            + _PREFIX
            + r"(?P<exc>(?:[A-Za-z_]\w{0,60}\.){0,8}(?!ChildFailedError\b)[A-Z]\w{0,80}?(?:Error|Exception))"
            + r"(?::[ \t]*(?P<detail>[^\n]{0,200})|[ \t]*$)"
        ),
        retryable=False,
        error_code="PYTHON_EXCEPTION",
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
        family="signals",
        pattern=_re(r"OOMKilled|OUT_OF_MEMORY|OutOfMemory", _I),
        retryable=False,
        error_code="OOM_KILLED",
        message="Killed for running out of memory",
        cause="The system killed the instance because it ran out of memory.",
        next_step="Raise the memory of the instance (resource_config.memory) and submit the job again.",
        documented="Kubernetes container state reason OOMKilled; Slurm job state OUT_OF_MEMORY",
    ),
    Signature(
        rule="image-pull-failed",
        family="startup",
        pattern=_re(r"ImagePullBackOff|ErrImagePull|InvalidImageName|ErrImageNeverPull", _I),
        retryable=False,
        error_code="IMAGE_PULL_FAILED",
        message="The image could not be pulled",
        cause="The container image could not be downloaded: a wrong image name or tag, a "
        "registry that needs a username and password, or one not reachable from the node.",
        next_step="Check the image address and tag, use a registry address reachable from the "
        "cluster (internal address in the same region), and give registry credentials "
        "if it does not allow anonymous pulls.",
        documented="Kubernetes container waiting reasons ImagePullBackOff, ErrImagePull; PAI-EAS FAQ",
        # Rate limits and registry outages behind the reason are retryable, a missing tag
        # or a denied repository is not (corpus startup-001, -002, -007, -022).
        refined_by=("startup", "external-services", "network"),
    ),
    Signature(
        rule="container-config-error",
        family="startup",
        pattern=_re(r"CreateContainerConfigError|CreateContainerError", _I),
        retryable=False,
        error_code="CONTAINER_CONFIG_ERROR",
        message="The container's configuration refers to something that does not exist",
        cause=_CONFIG_ERROR_CAUSE,
        next_step=_CONFIG_ERROR_NEXT,
        documented="Kubernetes container waiting reason CreateContainerConfigError; corpus startup-010, -012",
    ),
    Signature(
        rule="preempted",
        family="preemption",
        pattern=_re(r"Preempted|Preempting|PREEMPTED|Evicted", _I),
        retryable=True,
        error_code="PREEMPTED",
        message="The instance was preempted or evicted",
        cause="The scheduler took the resources back for other work, or evicted the instance "
        "because the node ran short of resources.",
        next_step="The job is retried automatically when resources are free again.",
        documented="Kubernetes pod reasons Evicted, Preempting; Slurm job state PREEMPTED",
        # An eviction because the instance used more than it requested is not retryable.
        refined_by=("preemption",),
    ),
    Signature(
        rule="time-limit",
        family="preemption",
        pattern=_re(r"TIMEOUT|DEADLINE|DeadlineExceeded", _I),
        retryable=False,
        error_code="TIME_LIMIT",
        message="The job ran into its time limit",
        cause="The scheduler stopped the instance because it ran longer than the time it asked "
        "for; an unchanged rerun needs the same time and is stopped again.",
        next_step=_TIME_LIMIT_NEXT,
        documented="Slurm job states TIMEOUT, DEADLINE; Kubernetes Job condition reason DeadlineExceeded; corpus preemption-021",
    ),
    # Decision: a Slurm CANCELLED with no reason in the log was a person's scancel (or a
    # script's), which a restart would undo; the log's "DUE TO PREEMPTION/NODE FAIL/TIME
    # LIMIT" decides instead when it is there.
    Signature(
        rule="cancelled",
        family="preemption",
        pattern=_re(r"CANCELLED(?: by \d{1,10})?\+?"),
        retryable=False,
        error_code="CANCELLED",
        message="The job was cancelled",
        cause="Someone (or a script) cancelled the job at the scheduler, with no preemption or node "
        "failure given as the reason.",
        next_step=_CANCELLED_NEXT,
        documented='Slurm job state CANCELLED (sacct "CANCELLED by <uid>"); corpus preemption-022, signals-008',
        refined_by=("preemption",),
    ),
    Signature(
        rule="node-lost",
        family="preemption",
        pattern=_re(r"NodeLost|NODE_FAIL|BOOT_FAIL|NodeShutdown|Shutdown|Lost", _I),
        retryable=True,
        error_code="NODE_LOST",
        message="The node running the instance was lost",
        cause="The node running the instance failed, shut down or lost contact.",
        next_step=_HARDWARE_NEXT,
        documented="Kubernetes pod reasons NodeLost, NodeShutdown; Slurm job states NODE_FAIL, BOOT_FAIL",
    ),
    Signature(
        rule="waiting-for-resources",
        family="startup",
        pattern=_re(r"Unschedulable|FailedScheduling|Resources|Insufficient[A-Za-z]{0,20}", _I),
        retryable=True,
        error_code="UNSCHEDULABLE",
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
