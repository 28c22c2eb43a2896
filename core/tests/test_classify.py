"""Classifying failed instances: the catalog over realistic log tails, precedence,
retryable keywords, exit-status fallbacks, and picking the root cause."""

from __future__ import annotations

import re
import signal

import pytest

from core import catalog
from core.catalog import BACKEND_SIGNATURES, LOG_SIGNATURES
from core.classify import (
    MAX_USER_KEYWORDS,
    TAIL_LIMIT_BYTES,
    Classification,
    ErrorSource,
    FailureInput,
    FailureObservation,
    classify_failure,
    pick_root_cause,
)

TRACEBACK_HEAD = (
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "/workspace/train.py", line 88, in <module>\n'
    "[rank1]:     main()\n"
    '[rank1]:   File "/workspace/train.py", line 71, in main\n'
    "[rank1]:     loss.backward()\n"
)

# One realistic tail per log signature: (rule, exit code, tail).
SAMPLES: list[tuple[str, int, str]] = [
    (
        "nccl-system-error",
        1,
        "node-1:412:498 [1] NCCL INFO Channel 00/02 :    0   1\n"
        "node-1:412:498 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.3.7<43185> failed : Software caused connection abort\n"
        + TRACEBACK_HEAD
        + "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n",
    ),
    (
        "nccl-remote-error",
        1,
        "node-2:77:120 [0] NCCL INFO comm 0x55d1 rank 0 nranks 4 cudaDev 0 busId 1b000 - Abort COMPLETE\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process exited or there was "
        "a network error, NCCL version 2.18.1\n"
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n",
    ),
    (
        "nccl-internal-error",
        1,
        "NCCL WARN Cuda failure 'invalid device context'\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, internal error, NCCL version 2.14.3\n"
        "ncclInternalError: Internal check failed.\n",
    ),
    (
        "nccl-cuda-error",
        1,
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1207, unhandled cuda error, NCCL version 2.10.3\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n",
    ),
    (
        "nccl-invalid-usage",
        1,
        "node-1:55:55 [0] init.cc:570 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, invalid usage, NCCL version 2.14.3\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n",
    ),
    (
        "nccl-invalid-argument",
        1,
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, invalid argument, NCCL version 2.11.4\n"
        "ncclInvalidArgument: Invalid value for an argument.\n",
    ),
    (
        "nccl-watchdog-timeout",
        -6,
        "[rank0]:[E1129 10:02:11.512316 412 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2143, OpType=ALLREDUCE, NumelIn=659, NumelOut=659, Timeout(ms)=600000) ran for 600535 milliseconds before timing out.\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n",
    ),
    (
        "nccl-communicator-aborted",
        1,
        "[rank2]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 2] NCCL communicator was aborted on rank 2. Original reason for failure was: "
        "[PG 0 Rank 2] Timed out\n",
    ),
    (
        "nccl-heartbeat-timeout",
        -6,
        "[rank3]:[E ProcessGroupNCCL.cpp:1418] [PG 0 Rank 3] Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
        "workMetaList_.size()=1\n",
    ),
    (
        "nccl-ib-completion-error",
        1,
        "gpu-node-12:1203:1290 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.1.0.12<52146> with "
        "status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.1.0.13 remoteGids::ffff:10.1.0.12\n",
    ),
    (
        "gloo-connect-full-mesh-failed",
        1,
        TRACEBACK_HEAD
        + "[rank1]: torch.distributed.DistNetworkError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n",
    ),
    (
        "gloo-connection-closed",
        1,
        "step 10 loss 0.6931\n"
        + TRACEBACK_HEAD
        + "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:18127\n",
    ),
    (
        "gloo-operation-timeout",
        1,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete\n",
    ),
    (
        "connection-reset",
        1,
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer\n",
    ),
    (
        "connection-refused",
        1,
        "W1129 10:11:01.123 torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py:... \n"
        "ConnectionRefusedError: [Errno 111] Connection refused\n",
    ),
    (
        "broken-pipe",
        1,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:575] Write error [10.0.0.4]:32871: Broken pipe\n",
    ),
    (
        "no-route-to-host",
        1,
        "node-3:88:140 [0] misc/socket.cc:538 NCCL WARN Net : Connect to 10.0.0.9<41231> failed : No route to host\n",
    ),
    (
        "connection-timed-out",
        1,
        "node-3:88:140 [0] misc/socket.cc:456 NCCL WARN Net : Connect to 10.0.0.9<41231> failed : Connection timed out\n",
    ),
    ("name-resolution-failed", 1, "socket.gaierror: [Errno -3] Temporary failure in name resolution\n"),
    (
        "address-in-use",
        1,
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, "
        "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n",
    ),
    ("store-socket-timeout", 1, TRACEBACK_HEAD + "[rank1]: torch.distributed.DistStoreError: Socket Timeout\n"),
    (
        "store-connect-timeout",
        1,
        "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying to connect to "
        "(10.0.0.1, 29500).\n",
    ),
    (
        "store-clients-timeout",
        1,
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.\n",
    ),
    ("rendezvous-timeout", 1, "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"),
    ("rendezvous-closed", 1, "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n"),
    (
        "rendezvous-connection",
        1,
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. "
        "See inner exception for details.\n",
    ),
    (
        "cuda-ecc-error",
        1,
        TRACEBACK_HEAD + "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
        "[rank1]: CUDA kernel errors might be asynchronously reported at some other API call\n",
    ),
    (
        "gpu-xid",
        -9,
        "[ 8123.412345] NVRM: Xid (PCI:0000:3b:00): 48, pid=4112, name=python, An uncorrectable double bit error (DBE) has been detected\n",
    ),
    ("gpu-fallen-off-bus", 1, "[ 9911.100000] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"),
    (
        "cuda-launch-failure",
        1,
        "RuntimeError: CUDA error: unspecified launch failure\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n",
    ),
    (
        "cuda-illegal-memory-access",
        1,
        TRACEBACK_HEAD + "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "[rank1]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
    ),
    (
        "cuda-device-assert",
        1,
        "../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] "
        "Assertion `t >= 0 && t < n_classes` failed.\n"
        "RuntimeError: CUDA error: device-side assert triggered\n",
    ),
    ("cuda-no-device", 1, "RuntimeError: CUDA error: no CUDA-capable device is detected\n"),
    (
        "cuda-driver-too-old",
        1,
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
        "CUDA driver version is insufficient for CUDA runtime version\n",
    ),
    (
        "cuda-out-of-memory",
        1,
        TRACEBACK_HEAD
        + "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.12 GiB is free.\n",
    ),
    (
        "oom-killed",
        137,
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4412.0. Some of the step tasks have been OOM Killed.\n",
    ),
    (
        "oom-killer",
        137,
        "[ 9121.443210] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n"
        "[ 9121.443337] Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:61234567kB\n",
    ),
    (
        "python-memory-error",
        1,
        "Traceback (most recent call last):\n"
        '  File "prep.py", line 12, in <module>\n'
        "    data = np.zeros((1 << 40,))\n"
        "MemoryError\n",
    ),
    (
        "shared-memory-exhausted",
        1,
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n",
    ),
    ("dataloader-worker-killed", 1, "RuntimeError: DataLoader worker (pid 4471) is killed by signal: Killed.\n"),
    (
        "node-failure",
        -15,
        "slurmstepd: error: *** STEP 4412.0 ON gpu-07 CANCELLED AT 2024-05-02T10:00:01 DUE TO NODE FAILURE ***\n",
    ),
    (
        "preempted",
        -15,
        "slurmstepd: error: *** JOB 4412 ON gpu-07 CANCELLED AT 2024-05-02T10:00:01 DUE TO PREEMPTION ***\n",
    ),
    (
        "launcher-received-signal",
        1,
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 9921 got signal: 15\n",
    ),
    (
        "worker-killed-by-signal",
        1,
        "W1129 10:00:00.000 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 9922 closing signal SIGTERM\n"
        "E1129 10:00:00.100 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -9) local_rank: 1 (pid: 9923)\n"
        "Signal 9 (SIGKILL) received by PID 9923\n",
    ),
    (
        "python-import-error",
        1,
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 3, in <module>\n'
        "    import deepspeed\n"
        "ModuleNotFoundError: No module named 'deepspeed'\n",
    ),
    (
        "python-syntax-error",
        1,
        '  File "/workspace/train.py", line 14\n'
        "    for step in range(10)\n"
        "                         ^\n"
        "SyntaxError: expected ':'\n",
    ),
    (
        "file-not-found",
        1,
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 20, in <module>\n'
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/imagenet/train.lst'\n",
    ),
    ("command-not-found", 127, "/bin/sh: 1: torchrunn: not found\n"),
    (
        "exec-format-error",
        1,
        'time="2024-10-21T12:59:35Z" level=error msg="fail to start program with error: fork/exec /bin/sh: exec format error"\n',
    ),
    ("permission-denied", 126, "/bin/sh: 1: ./run_train.sh: Permission denied\n"),
    (
        "disk-full",
        1,
        "[2024-10-21 20:59:33] serialize_file(_flatten(tensors), filename, metadata=metadata)\n"
        "[2024-10-21 20:59:33] safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
        'message: "No space left on device" })\n'
        '[2024-10-21 20:59:35] time="2024-10-21T12:59:35Z" level=info msg="program stopped with status:exit status 1" program=/bin/sh\n',
    ),
    (
        "loss-is-nan",
        1,
        "iter 1200 | lr 3.0e-04 | loss 2.113\nFloatingPointError: Loss became infinite or NaN at iteration=1201!\n",
    ),
    (
        "gpu-xid-application",
        1,
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=4112, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address\n",
    ),
    (
        "service-denied",
        1,
        "Traceback (most recent call last):\n"
        "huggingface_hub.utils._errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-65)\n",
    ),
    (
        "evicted-node-pressure",
        1,
        "Warning  Evicted  12s  kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, available: 88Mi.\n",
    ),
    (
        "executable-not-found",
        128,
        "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        'failed: unable to start container process: exec: "torchrun": executable file not found in $PATH: unknown\n',
    ),
    (
        "tls-certificate-untrusted",
        1,
        'Error response from daemon: Get "https://registry.internal/v2/": x509: certificate signed by unknown authority\n',
    ),
    ("disk-quota-exceeded", 1, "OSError: [Errno 122] Disk quota exceeded: '/home/u/ckpt/step_1200.pt'\n"),
    ("read-only-file-system", 1, "OSError: [Errno 30] Read-only file system: '/data/checkpoints'\n"),
    (
        "mount-disconnected",
        1,
        "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/s3fs/shard-00017.tar'\n",
    ),
    (
        "shm-write-failed",
        1,
        "RuntimeError: unable to write to file </torch_412_1954506624>: No space left on device (28)\n",
    ),
    ("cuda-no-kernel-image", 1, "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"),
    (
        "cuda-kernel-fault",
        1,
        "RuntimeError: CUDA error: misaligned address\nCUDA kernel errors might be asynchronously reported\n",
    ),
    (
        "nvidia-driver-unreachable",
        1,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n",
    ),
    ("ib-transport-fault", 1, "node-3:221:290 [2] NCCL WARN NET/IB : Got async event : port error\n"),
    (
        "grpc-unreachable",
        1,
        'grpc._channel._InactiveRpcError: status = StatusCode.UNAVAILABLE details = "failed to connect to all addresses"\n',
    ),
    ("nan-detected", 1, "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.\n"),
    (
        "pod-sandbox-failed",
        1,
        "Warning  FailedCreatePodSandBox  41s  kubelet  Failed to create pod sandbox: rpc error: code = Unknown desc = "
        'failed to setup network for sandbox "3f1c": plugin type="calico" failed (add): error getting ClusterInformation\n',
    ),
    (
        "connection-dropped",
        1,
        "requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection "
        "without response'))\n",
    ),
    (
        "service-connection-eof",
        1,
        'Using default tag: latest\nError response from daemon: Get "https://registry.example.com/v2/": EOF\n',
    ),
    (
        "service-host-unknown",
        1,
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='mlflow.old-team.example', port=443): Max retries "
        "exceeded with url: /api/2.0/mlflow/runs/create (Caused by NewConnectionError('<urllib3.connection."
        "HTTPSConnection object at 0x7f1c>: Failed to establish a new connection: [Errno -2] Name or service not known'))\n",
    ),
    (
        "c10d-name-not-resolved",
        1,
        "[W1129 10:00:00.100 socket.cpp:752] [c10d] The IPv6 network addresses of (trainer-0.internal, 29500) cannot be "
        "retrieved (gai error: -2 - Name or service not known).\n"
        "[W1129 10:00:01.100 socket.cpp:752] [c10d] The IPv4 network addresses of (trainer-0.internal, 29500) cannot be "
        "retrieved (gai error: -2 - Name or service not known).\n",
    ),
    (
        "ray-process-died",
        1,
        "(TorchTrainer pid=4121) ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n",
    ),
    (
        "nccl-shm-segment-failed",
        1,
        TRACEBACK_HEAD
        + "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "[rank1]: Last error:\n"
        "[rank1]: Error while creating shared memory segment /dev/shm/nccl-Hq3Zb1 (size 9637888)\n",
    ),
    (
        "cuda-invalid-device",
        1,
        TRACEBACK_HEAD + "[rank5]:     torch.cuda.set_device(local_rank)\n"
        "[rank5]: RuntimeError: CUDA error: invalid device ordinal\n"
        "[rank5]: CUDA kernel errors might be asynchronously reported at some other API call\n",
    ),
    (
        "evicted-over-own-limit",
        1,
        "Warning  Evicted  3m  kubelet  Pod ephemeral local storage usage exceeds the total limit of containers 20Gi.\n",
    ),
    (
        "nccl-ib-memlock",
        1,
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
        "[rank0]: Last error:\n"
        "[rank0]: Call to ibv_reg_mr failed with error Cannot allocate memory\n",
    ),
    (
        "store-barrier-timeout",
        1,
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
        "store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)\n",
    ),
    ("too-many-open-files", 1, "OSError: [Errno 24] Too many open files: '/data/shards/shard-0412.tar'\n"),
    ("nvlink-error", 1, "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution\n"),
    (
        "grpc-connection-lost",
        1,
        "grpc._channel._MultiThreadedRendezvous: <_MultiThreadedRendezvous of RPC that terminated with: "
        'status = StatusCode.UNAVAILABLE details = "GOAWAY received">\n',
    ),
    (
        "grpc-unavailable",
        1,
        TRACEBACK_HEAD + "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:\n"
        "\tstatus = StatusCode.UNAVAILABLE\n"
        '\tdetails = "Socket closed"\n',
    ),
    # torch_xla's xla_dist on a TPU pod that failed its health check (pytorch/xla#2142)
    ("tpu-not-ready", 1, "RuntimeError: TPU node-v3-32 is not HEALTHY yet. Re-run when all TPUs are HEALTHY\n"),
    # torch.save into a volume that filled up (h2oai/h2o-llmstudio#214)
    (
        "checkpoint-write-failed",
        1,
        "Traceback (most recent call last):\n"
        'File "/root/.local/share/virtualenvs/workspace-dqq3IVyd/lib/python3.10/site-packages/torch/serialization.py", '
        "line 668, in _save\n"
        "zip_file.write_record(name, storage.data_ptr(), num_bytes)\n"
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/228: "
        "file write failed\n",
    ),
    # huggingface_hub's snapshot_download with HF_HUB_OFFLINE=1 and the model not cached
    (
        "hub-offline-mode",
        1,
        "huggingface_hub.utils._errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder "
        "for the specified revision on the local disk and outgoing traffic has been disabled. To enable repo "
        "look-ups and downloads online, pass 'local_files_only=False' as input.\n",
    ),
    # libtorch's internal assert as an uncaught c10::Error, aborting the process (pytorch/pytorch#76229)
    (
        "native-abort",
        134,
        "terminate called after throwing an instance of 'c10::Error'\n"
        '  what():  _ivalue_INTERNAL ASSERT FAILED at "../torch/csrc/jit/api/object.h":35, please report a bug to '
        "PyTorch. \n",
    ),
    ("loss-value-nan", 1, "iter 1200 | lr 3.0e-04 | loss 2.113\n[INFO] epoch 3 step 1201: train_loss=nan lr=3.0e-04\n"),
    (
        "python-exception",
        1,
        TRACEBACK_HEAD + '[rank1]:   File "/workspace/model.py", line 30, in forward\n'
        "[rank1]:     x = x.view(b, -1, self.dim)\n"
        "[rank1]: ValueError: expected 3 dimensions, got 2\n",
    ),
]


def classify(tail, exit_code=1, sig=None, reason="", keywords=()):
    return classify_failure(FailureInput(exit_code, sig, tail, reason, tuple(keywords)))


# ---- the catalog ---------------------------------------------------------------------


@pytest.mark.parametrize("rule, exit_code, tail", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_each_log_signature_classifies_its_realistic_tail(rule, exit_code, tail):
    sig = catalog.signature(rule)
    got = classify(tail, exit_code=exit_code)
    assert got.rule == rule
    assert got.source is ErrorSource.LOG
    assert got.retryable is sig.retryable
    assert got.cascade_like is sig.cascade_like
    assert got.error_code == sig.error_code
    assert got.cause == sig.cause and got.next_step == sig.next_step
    assert "\n" not in got.message and got.message


def test_every_log_signature_has_a_realistic_sample():
    # A signature grown from the corpus (issue 13) has its sample there instead: its
    # `documented` names the entries, and test_corpus checks they classify by it.
    sampled = {rule for rule, _, _ in SAMPLES}
    assert sampled <= {s.rule for s in LOG_SIGNATURES}
    assert [s.rule for s in LOG_SIGNATURES if s.rule not in sampled and "corpus " not in s.documented] == []


def test_catalog_holds_at_least_thirty_documented_signatures_with_unique_rules():
    assert len(LOG_SIGNATURES) >= 30
    rules = [s.rule for s in LOG_SIGNATURES]
    assert len(rules) == len(set(rules))
    for sig in LOG_SIGNATURES + BACKEND_SIGNATURES:
        assert sig.documented, sig.rule
        assert sig.cause.endswith(".") and sig.next_step.endswith("."), sig.rule
        for name in re.findall(r"{(\w+)}", sig.message):
            assert name in sig.pattern.groupindex, (sig.rule, name)


def test_only_the_uncaught_python_exception_is_generic():
    assert [s.rule for s in LOG_SIGNATURES if not s.specific] == ["python-exception"]


def test_catalog_patterns_start_with_a_literal_or_a_line_anchor():
    # Keeps every search linear: no pattern can start a scan at every position of a line.
    for sig in LOG_SIGNATURES:
        assert not sig.pattern.pattern.startswith((".", "[^", "\\s", "\\w", "(?:.")), sig.rule


def test_python_exception_message_names_the_exception_and_its_text():
    got = classify(TRACEBACK_HEAD + "[rank1]: KeyError: 'labels'\n")
    assert got.rule == "python-exception"
    assert got.message == "KeyError: 'labels'"
    assert got.retryable is False


@pytest.mark.parametrize(
    "last_line",
    [
        "TypeError: forward() missing 1 required positional argument: 'x'",
        "AssertionError",
        "ZeroDivisionError: division by zero",
        "IndexError: list index out of range",
        "AttributeError: 'NoneType' object has no attribute 'shape'",
    ],
)
def test_user_code_exceptions_are_not_retryable(last_line):
    got = classify('Traceback (most recent call last):\n  File "t.py", line 1\n' + last_line + "\n")
    assert (got.rule, got.retryable) == ("python-exception", False)
    assert got.message.startswith(last_line.split(":")[0])


def test_a_warning_that_mentions_an_exception_mid_line_is_not_a_crash():
    got = classify("WARNING: caught ValueError: retrying batch\n", exit_code=3)
    assert got.rule == "crashed-with-exit-code"


def test_torchrun_child_failed_summary_does_not_hide_the_child_error():
    tail = (
        "[rank1]: ValueError: bad batch\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
    )
    assert classify(tail).message == "ValueError: bad batch"


# accelerate's launcher ends every failed run with its own traceback (kohya-ss/sd-scripts#1354,
# accelerate/commands/launch.py simple_launcher), the old torch.distributed.launch and DeepSpeed's
# runner likewise (thu-coai/EVA#4); the child's output is above it.
ACCELERATE_SUMMARY = (
    "Traceback (most recent call last):\n"
    '  File "/Users/kleinsun/open/kohya_ss/venv/bin/accelerate", line 8, in <module>\n'
    "    sys.exit(main())\n"
    '  File "/Users/kleinsun/open/kohya_ss/venv/lib/python3.10/site-packages/accelerate/commands/launch.py", '
    "line 637, in simple_launcher\n"
    "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
    "subprocess.CalledProcessError: Command '['/Users/kleinsun/open/kohya_ss/venv/bin/python', "
    "'/Users/kleinsun/Documents/open/kohya_ss/sd-scripts/sdxl_train.py', '--config_file', "
    "'/Users/kleinsun/Documents/open/kohya_ss/outputs/config_dreambooth-20240531-163416.toml']' "
    "returned non-zero exit status 1.\n"
)


@pytest.mark.parametrize(
    "child, rule, retryable",
    [
        # the child's transient error, in its own traceback (apqlzm/medihunter#52's line)
        (
            TRACEBACK_HEAD + "requests.exceptions.ConnectionError: ('Connection aborted.', "
            "RemoteDisconnected('Remote end closed connection without response'))\n",
            "connection-dropped",
            True,
        ),
        # the child's bug: the child's exception is named, not the launcher's
        (TRACEBACK_HEAD + "KeyError: 'input_ids'\n", "python-exception", False),
    ],
    ids=["transient", "bug"],
)
def test_a_launchers_called_process_error_does_not_hide_the_childs_error(child, rule, retryable):
    got = classify(child + ACCELERATE_SUMMARY)
    assert (got.rule, got.retryable) == (rule, retryable)
    assert "CalledProcessError" not in got.message


@pytest.mark.parametrize(
    "child",
    [
        "",
        # DeepSpeed's runner could not ssh to its hostfile's placeholder host (corpus rendezvous-007):
        # no exception of the child's, so what came before the launcher's traceback stays stale
        "ssh: Could not resolve hostname node-0: Name or service not known\n",
    ],
    ids=["no-output", "no-exception"],
)
def test_a_called_process_error_without_a_childs_exception_is_the_crash_it_reports(child):
    got = classify(child + ACCELERATE_SUMMARY)
    assert (got.rule, got.retryable) == ("python-exception", False)
    assert got.message.startswith("subprocess.CalledProcessError: Command")


def test_a_stale_warning_above_the_childs_own_traceback_stays_stale_under_a_launcher():
    # the child's exception, not the launcher's, is the one earlier warnings must precede
    tail = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to [::ffff:10.0.0.1]:29500 "
        "(errno: 111 - Connection refused).\n" + TRACEBACK_HEAD + "[rank1]: ValueError: expected 3 dimensions, got 2\n"
    )
    got = classify(tail + ACCELERATE_SUMMARY)
    assert (got.rule, got.message) == ("python-exception", "ValueError: expected 3 dimensions, got 2")


@pytest.mark.parametrize(
    "tail, rule, retryable",
    [
        # the hub unreachable with offline mode off is the connection's (huggingface_hub's message)
        (
            "huggingface_hub.utils._errors.LocalEntryNotFoundError: Connection error, and we cannot find the "
            "requested files in the disk cache. Please try again or make sure your Internet connection is on.\n",
            "service-timeout",
            True,
        ),
        # a checkpoint write that says why: the disk is full (Linux's ENOSPC text after PyTorch's)
        (
            "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file "
            "data/228: file write failed\nOSError: [Errno 28] No space left on device\n",
            "disk-full",
            False,
        ),
        # torch_xla's other refusal: the TPU still being created or repaired
        ("RuntimeError: TPU my-pod is not READY yet. Re-run when all TPUs are READY\n", "tpu-not-ready", True),
    ],
    ids=["hub-online", "write-says-disk-full", "tpu-not-ready"],
)
def test_the_hub_offline_checkpoint_write_and_tpu_readings_keep_to_their_own_case(tail, rule, retryable):
    got = classify(tail)
    assert (got.rule, got.retryable) == (rule, retryable)


def test_gpu_xid_message_names_the_xid():
    got = classify("NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n", exit_code=-9)
    assert got.rule in ("gpu-xid", "gpu-fallen-off-bus")
    assert classify("NVRM: Xid (PCI:0000:3b:00): 48, pid=4112, DBE\n").message == "The NVIDIA driver reported Xid 48"


# ---- backend reasons -------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason, rule, retryable",
    [
        ("OOMKilled", "oom-killed", False),
        ("OUT_OF_MEMORY", "oom-killed", False),
        ("Evicted", "preempted", True),
        ("PREEMPTED", "preempted", True),
        ("NodeLost", "node-lost", True),
        ("NODE_FAIL", "node-lost", True),
        ("BOOT_FAIL", "node-lost", True),
        ("TIMEOUT", "time-limit", False),
        ("DEADLINE", "time-limit", False),
        ("DeadlineExceeded", "time-limit", False),
        ("CreateContainerConfigError", "container-config-error", False),
        ("Unschedulable", "waiting-for-resources", True),
    ],
)
def test_decisive_backend_reason_classifies_before_the_log(reason, rule, retryable):
    got = classify(
        "RuntimeError: Connection reset by peer\n", exit_code=137, reason=reason, keywords=("connection reset",)
    )
    assert (got.rule, got.retryable, got.source) == (rule, retryable, ErrorSource.BACKEND)


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull"])
def test_an_image_pull_failure_is_decided_by_what_its_log_says(reason):
    # Issue 13: a rate limit or registry outage behind the reason is retryable, a missing
    # tag is not, and with no such line the reason decides (not retryable).
    got = classify("RuntimeError: Connection reset by peer\n", exit_code=137, reason=reason)
    assert (got.rule, got.retryable, got.source) == ("connection-reset", True, ErrorSource.LOG)
    got = classify(
        'Failed to pull image "busybox": 429 Too Many Requests - Server message: toomanyrequests\n', reason=reason
    )
    assert (got.rule, got.retryable) == ("service-rate-limited", True)
    got = classify("manifest for leader:v1.0-rc9 not found: manifest unknown: manifest unknown\n", reason=reason)
    assert (got.rule, got.retryable) == ("image-not-found", False)
    got = classify("step 1\n", reason=reason)
    assert (got.rule, got.retryable, got.source, got.evidence) == (
        "image-pull-failed",
        False,
        ErrorSource.BACKEND,
        reason,
    )


@pytest.mark.parametrize(
    "log, rule, retryable",
    [
        (
            "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***\n",
            "preempted",
            True,
        ),
        (
            "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2020-07-11T22:48:26 DUE TO TIME LIMIT ***\n",
            "time-limit",
            False,
        ),
        ("slurmstepd: error: *** STEP 3.0 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***\n", "cancelled", False),
        ("", "cancelled", False),
    ],
)
def test_a_slurm_cancellation_is_decided_by_its_reason_in_the_log(log, rule, retryable):
    got = classify(log, exit_code=None, sig=signal.SIGTERM, reason="CANCELLED")
    assert (got.rule, got.retryable) == (rule, retryable)


def test_an_eviction_for_using_more_than_requested_is_not_retried():
    log = (
        "Warning Evicted pod/egg The node was low on resource: memory. Container egg was using 5053216Ki, "
        "which exceeds its request of 0.\n"
    )
    assert (classify(log, reason="Evicted").rule, classify(log, reason="Evicted").retryable) == (
        "evicted-over-request",
        False,
    )
    assert classify("The node had condition: [DiskPressure].\n", reason="Evicted").retryable is True


@pytest.mark.parametrize(
    "sig, log, rule, retryable",
    [
        (signal.SIGSEGV, "Segmentation fault (core dumped)\n", "crashed-by-signal", False),
        (signal.SIGBUS, "Bus error (core dumped)\n", "crashed-by-signal", False),
        # a stale network warning does not explain a segfault ...
        (
            signal.SIGSEGV,
            "[W socket.cpp:601] Connection refused, retrying\nSegmentation fault\n",
            "crashed-by-signal",
            False,
        ),
        # ... a GPU fault does
        (signal.SIGSEGV, "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n", "gpu-xid", True),
        # an abort with nothing to explain it is retried (the repeated-failure guard stops a repeat)
        (signal.SIGABRT, "terminate called after throwing an instance of 'c10::Error'\n", "killed-by-signal", True),
        (signal.SIGABRT, "what():  CUDA error: unknown error\n", "cuda-unknown-error", True),
    ],
)
def test_a_crash_by_signal_is_retried_only_when_hardware_explains_it(sig, log, rule, retryable):
    got = classify(log, exit_code=None, sig=sig)
    assert (got.rule, got.retryable) == (rule, retryable)


def test_oom_killed_tells_to_raise_the_memory():
    got = classify("", exit_code=137, reason="OOMKilled")
    assert "memory" in got.cause and "Raise the memory" in got.next_step


def test_image_pull_failure_explains_the_image_could_not_be_pulled():
    got = classify("", exit_code=1, reason="ImagePullBackOff")
    assert "image could not be" in got.cause.lower() or "could not be downloaded" in got.cause


def test_waiting_for_resources_is_explained():
    got = classify("", exit_code=1, reason="FailedScheduling")
    assert "waited a long time" in got.cause


def test_a_non_decisive_backend_reason_lets_the_log_decide():
    got = classify("ModuleNotFoundError: No module named 'apex'\n", reason="Error")
    assert (got.rule, got.source) == ("python-import-error", ErrorSource.LOG)


# ---- precedence --------------------------------------------------------------------


def test_runtime_error_wrapping_connection_reset_is_the_comm_error_not_a_user_bug():
    got = classify(
        TRACEBACK_HEAD + "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
        "Connection reset by peer [10.0.0.2]:40112\n"
    )
    assert (got.rule, got.retryable) == ("connection-reset", True)


def test_a_specific_cause_chained_into_the_final_traceback_beats_the_generic_exception():
    tail = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/data.py", line 41, in fetch\n'
        "ConnectionResetError: [Errno 104] Connection reset by peer\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 12, in <module>\n'
        "RuntimeError: could not fetch shard 7\n"
    )
    got = classify(tail)
    assert (got.rule, got.retryable) == ("connection-reset", True)


# ssl's exception for a TLS connection the peer closed, as Python prints it (Lib/ssl.py,
# SSLZeroReturnError's "TLS/SSL connection has been closed (EOF)"); no signature reads it.
ABORTED = "ssl.SSLZeroReturnError: TLS/SSL connection has been closed (EOF) (_ssl.c:1131)\n"


@pytest.mark.parametrize(
    "marker",
    [
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    ],
)
def test_a_generic_exception_raised_from_another_keeps_the_chains_first_exception_as_its_root_cause(marker):
    tail = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/data.py", line 41, in fetch\n'
        "    chunk = sock.recv(65536)\n" + ABORTED + "\n" + marker + "\n\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 12, in <module>\n'
        "RuntimeError: could not fetch shard 7\n"
    )
    got = classify(tail)
    assert (got.rule, got.evidence) == ("python-exception", "RuntimeError: could not fetch shard 7")
    assert got.root_cause == ABORTED.strip()


def test_an_exception_that_is_not_chained_has_no_root_cause_but_itself():
    assert classify(TRACEBACK_HEAD + ABORTED).root_cause == ""
    # two tracebacks that are not chained (a caught warning's, then the crash) are no chain
    tail = "Traceback (most recent call last):\n" + ABORTED + "step 4 loss 1.9\n" + TRACEBACK_HEAD + "KeyError: 'x'\n"
    assert classify(tail).root_cause == ""


def test_startup_connection_refused_warnings_do_not_hide_a_later_user_bug():
    # torch's rendezvous retries print these while the master starts; the run then went on.
    tail = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to [::ffff:10.0.0.1]:29500 "
        "(errno: 111 - Connection refused).\n"
        "step 1 loss 2.30\nstep 2 loss 2.11\n" + TRACEBACK_HEAD + "[rank1]: ValueError: expected 3 dimensions, got 2\n"
    )
    got = classify(tail)
    assert (got.rule, got.retryable) == ("python-exception", False)


def test_without_a_traceback_header_a_specific_signature_beats_a_generic_line():
    tail = "NCCL WARN socketProgress: Connection closed by remote peer node-2<5011>\nRuntimeError: collective failed\n"
    assert classify(tail).rule == "gloo-connection-closed"


def test_the_most_recent_of_several_specific_errors_wins():
    first = classify(
        "RuntimeError: CUDA out of memory. Tried to allocate 1 GiB\n"
        "ConnectionResetError: [Errno 104] Connection reset by peer\n"
    )
    assert first.rule == "connection-reset"
    second = classify(
        "ConnectionResetError: [Errno 104] Connection reset by peer\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB\n"
    )
    assert (second.rule, second.retryable) == ("cuda-out-of-memory", False)


def test_on_one_line_the_narrower_catalog_entry_wins():
    got = classify(
        "torch.distributed.DistNetworkError: Gloo connectFullMesh failed with "
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] Connection refused\n"
    )
    assert got.rule == "gloo-connect-full-mesh-failed"


def test_a_name_c10d_retried_to_resolve_is_not_a_start_up_race_but_a_first_failed_lookup_is():
    # c10d retries a failed lookup until its connect timeout (pytorch/pytorch#74641), so its
    # warning at the end of a log is a name that never resolved; the old TCPStore's
    # first-lookup ValueError is the Kubernetes start-up race (pytorch/pytorch#73682).
    c10d = classify(
        "[W socket.cpp:601] [c10d] The IPv6 network addresses of (user, 53821) cannot be retrieved "
        "(gai error: -3 - Temporary failure in name resolution).\n"
    )
    assert (c10d.rule, c10d.retryable, c10d.family) == ("c10d-name-not-resolved", False, "rendezvous")
    race = classify(
        "store = TCPStore(master_addr, master_port, world_size, start_daemon, timeout)\n"
        "ValueError: host not found: Name or service not known\n"
    )
    assert (race.rule, race.retryable) == ("name-not-resolved", True)


def test_a_service_host_that_does_not_exist_is_not_retried_but_a_resolver_failure_is():
    pool = (
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
        "exceeded with url: /bert/resolve/main/config.json (Caused by NewConnectionError('<urllib3.connection."
        "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno {}] {}'))\n"
    )
    gone = classify(pool.format(-2, "Name or service not known"))
    assert (gone.rule, gone.retryable) == ("service-host-unknown", False)
    flaky = classify(pool.format(-3, "Temporary failure in name resolution"))
    assert (flaky.rule, flaky.retryable) == ("name-resolution-failed", True)


def test_a_ray_process_that_died_is_a_system_failure_but_an_actor_exception_is_the_program():
    died = classify("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n")
    assert (died.rule, died.retryable, died.cascade_like) == ("ray-process-died", True, True)
    crashed = classify(
        "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. "
        "Check python-core-worker-*.log files for more information.\n"
    )
    assert crashed.rule == "ray-process-died"
    raised = classify(
        "Traceback (most recent call last):\n"
        "ray.exceptions.RayActorError: The actor died because of an error raised in its creation task, "
        "ray::Trainer.__init__() (pid=41, ip=10.0.0.4)\n"
    )
    assert (raised.rule, raised.retryable) == ("python-exception", False)


def test_an_unspecified_launch_failure_is_the_programs_kernel_unless_the_gpu_says_otherwise():
    launch = "RuntimeError: CUDA error: unspecified launch failure\n"
    assert classify(launch).retryable is False
    got = classify(launch + "[ 8812.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert got.retryable is True and got.family == "gpu"


def test_the_last_error_nccl_gives_decides_over_its_generic_error_class():
    # ncclUnhandledCudaError / ncclSystemError alone read as a GPU or network fault; the
    # "Last error:" line after them says when it is the program's memory or the container.
    oom = classify(
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 2 'out of memory'\n"
    )
    assert (oom.rule, oom.retryable) == ("cuda-out-of-memory", False)
    fallback = classify("node-1:412:498 [1] NCCL WARN Cuda failure 'out of memory'\n")
    assert fallback.rule == "cuda-out-of-memory"
    shm = classify(
        "ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n"
        "node-1:4:4 [0] misc/shmutils.cc:72 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-2pQ (size 9637888), error: No space left on device (28)\n"
    )
    assert (shm.rule, shm.retryable) == ("nccl-shm-segment-failed", False)
    peer = classify("ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n")
    assert (peer.rule, peer.retryable) == ("nccl-system-error", True)


def test_an_eviction_for_the_pods_own_disk_limit_is_not_retried_but_node_pressure_is():
    own = classify_failure(
        FailureInput(
            exit_code=None,
            signal=None,
            backend_reason="Evicted",
            log_tail='Message: Container trainer exceeded its local ephemeral storage limit "10Gi". \n',
        )
    )
    assert (own.rule, own.retryable) == ("evicted-over-own-limit", False)
    pressure = classify_failure(
        FailureInput(
            exit_code=None,
            signal=None,
            backend_reason="Evicted",
            log_tail="Message: The node was low on resource: ephemeral-storage.\n",
        )
    )
    assert pressure.retryable is True


def test_nccl_without_a_usable_interface_in_its_comm_id_subnet_is_a_configuration():
    got = classify(
        "node-2:31:31 [0] NCCL WARN NET/Socket : No interface found in the same subnet as remote "
        "address 10.9.0.4<45015>\n"
        "node-2:31:31 [0] NCCL WARN NET/Socket : No usable listening interface found\n"
    )
    assert (got.rule, got.retryable) == ("nccl-no-socket-interface", False)


def test_import_error_for_a_missing_shared_library_is_an_import_error():
    got = classify("ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory\n")
    assert got.rule == "python-import-error"
    assert got.message.startswith("ImportError: libcudnn.so.8")


def test_bare_killed_with_exit_137_is_a_retryable_sigkill_not_oom():
    got = classify("/bin/sh: line 1:  4242 Killed                  python train.py\n", exit_code=137)
    assert (got.rule, got.retryable, got.error_code) == ("killed-by-signal", True, "SIGKILL")
    assert "exit code 137" in got.message


def test_oom_killer_evidence_in_the_log_makes_exit_137_an_oom_kill():
    # Issue 13: the node-wide OOM killer's kill is retryable (other tenants' memory); a kill
    # for exceeding the instance's own memory limit (cgroup) is not.
    got = classify("[ 812.3] Out of memory: Killed process 4242 (python) total-vm:98765432kB\nKilled\n", exit_code=137)
    assert (got.rule, got.retryable, got.family) == ("oom-killer", True, "signals")
    assert got.evidence.startswith("[ 812.3] Out of memory: Killed process 4242")
    got = classify("[ 812.3] Memory cgroup out of memory: Killed process 4242 (python)\nKilled\n", exit_code=137)
    assert (got.rule, got.retryable) == ("oom-killed", False)


def test_a_startup_warning_does_not_turn_a_sigkill_into_a_user_bug():
    tail = (
        "mkdir: cannot create directory '/root/.triton': Permission denied\n"
        "ls: cannot access '/opt/extra': No such file or directory\n"
        "step 100 loss 1.93\nstep 101 loss 1.92\n"
    )
    for code, sig in ((137, None), (-9, None), (None, signal.SIGTERM)):
        got = classify(tail, exit_code=code, sig=sig)
        assert (got.rule, got.retryable) == ("killed-by-signal", True), (code, sig)


def test_a_retryable_signature_still_explains_a_sigterm():
    got = classify(
        "slurmstepd: error: *** JOB 4412 ON gpu-07 CANCELLED AT 2024-05-02T10:00:01 DUE TO PREEMPTION ***\n",
        exit_code=None,
        sig=signal.SIGTERM,
    )
    assert got.rule == "preempted"


def test_an_abort_after_a_cuda_bug_keeps_the_bug_as_the_cause():
    tail = (
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  CUDA error: an illegal memory access was encountered\n"
    )
    got = classify(tail, exit_code=-6)
    assert (got.rule, got.retryable) == ("cuda-illegal-memory-access", False)


def test_cuda_out_of_memory_is_not_retryable():
    got = classify("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n")
    assert got.retryable is False and got.error_code == "CUDA_OOM"


# ---- retryable keywords ------------------------------------------------------------


def test_user_keyword_matches_case_insensitively_and_makes_the_failure_retryable():
    got = classify("ValueError: Connect Timeout while fetching shard 7\n", keywords=("connect timeout",))
    assert (got.rule, got.retryable, got.source) == ("user-keyword", True, ErrorSource.USER_KEYWORD)
    assert '"connect timeout"' in got.message


def test_user_keyword_beats_a_non_retryable_catalog_signature():
    got = classify("torch.OutOfMemoryError: CUDA out of memory. error_yyy\n", keywords=("ERROR_YYY",))
    assert got.retryable is True and got.source is ErrorSource.USER_KEYWORD


def test_user_keyword_is_literal_not_a_regular_expression():
    assert classify("ValueError: aXYZb\n", keywords=("a.*b",)).rule == "python-exception"
    assert classify("ValueError: saw a.*b in the input\n", keywords=("a.*b",)).rule == "user-keyword"


def test_regex_metacharacters_in_keywords_are_harmless():
    keywords = ("(a+)+$", "[", "\\", "(?P<x>", "*")
    got = classify("ValueError: " + "a" * 5000 + "!\n", keywords=keywords)
    assert got.rule == "python-exception"
    assert classify("ValueError: got [ here\n", keywords=keywords).rule == "user-keyword"


def test_the_keyword_appearing_last_in_the_log_is_named():
    got = classify("error_aaa then later error_bbb\n", keywords=("error_bbb", "error_aaa"))
    assert '"error_bbb"' in got.message
    got = classify("error_bbb then later error_aaa\n", keywords=("error_bbb", "error_aaa"))
    assert '"error_aaa"' in got.message


def test_keyword_matching_builds_no_regular_expression(monkeypatch):
    # Structural guarantee of linear time whatever the keywords: classification compiles
    # nothing at call time (catalog patterns are compiled at import), so no keyword can
    # become a pattern. 100 adversarial keywords over a full 64 KiB tail.
    calls = []

    def spy(name):
        def record(*args, **kwargs):
            calls.append((name, args))
            raise AssertionError(f"re.{name} called during classification")

        return record

    for name in ("compile", "search", "match", "fullmatch", "finditer", "findall", "sub", "split"):
        monkeypatch.setattr(re, name, spy(name))
    keywords = tuple("(a|aa)*" + "a" * i + "$" for i in range(MAX_USER_KEYWORDS))
    tail = ("a" * 120 + "\n") * (TAIL_LIMIT_BYTES // 121 + 10)
    got = classify(tail, keywords=keywords, exit_code=2)
    assert calls == []
    assert got.rule == "crashed-with-exit-code"


def test_more_than_a_hundred_keywords_are_rejected_naming_the_field():
    with pytest.raises(ValueError, match="user_keywords: at most 100"):
        classify("x", keywords=tuple(f"k{i}" for i in range(101)))


def test_an_empty_keyword_is_rejected_because_it_would_match_everything():
    with pytest.raises(ValueError, match=r"user_keywords\[1\]"):
        classify("x", keywords=("fine", "  "))


# ---- the tail ---------------------------------------------------------------------


def test_only_the_last_64_kib_of_the_tail_are_read():
    old = "ModuleNotFoundError: No module named 'x'\n"
    tail = old + "." * TAIL_LIMIT_BYTES
    assert classify(tail, exit_code=5).rule == "crashed-with-exit-code"
    assert classify(old + "." * (TAIL_LIMIT_BYTES - len(old)), exit_code=5).rule == "python-import-error"


def test_bytes_with_invalid_utf8_are_decoded_with_replacement():
    tail = b"\xff\xfe garbage \xc3\n" + "[rank0]: ValueError: ünicode ok\n".encode()
    got = classify(tail)
    assert got.message == "ValueError: ünicode ok"


def test_carriage_return_progress_bars_do_not_hide_an_exception_line():
    tail = " 10%|#   | 1/10\r 20%|##  | 2/10\rValueError: bad label 7\n"
    assert classify(tail).message == "ValueError: bad label 7"


def test_a_log_tail_of_the_wrong_type_is_rejected_naming_the_field():
    with pytest.raises(TypeError, match="log_tail"):
        classify_failure(FailureInput(1, None, 42))


# ---- exit status fallbacks --------------------------------------------------------


def test_exit_code_zero_is_not_a_failure():
    with pytest.raises(ValueError, match="exit_code: 0"):
        classify("all done\n", exit_code=0)


def test_unknown_nonzero_exit_is_a_non_retryable_crash_that_points_at_the_log():
    got = classify("step 3 loss 0.5\n", exit_code=3)
    assert (got.rule, got.retryable, got.source, got.error_code) == (
        "crashed-with-exit-code",
        False,
        ErrorSource.EXIT_CODE,
        "EXIT_CODE_3",
    )
    assert got.message == "Crashed with exit code 3"
    assert "Read the instance log" in got.next_step


def test_killed_by_signal_without_evidence_is_retryable():
    got = classify("step 3 loss 0.5\n", exit_code=None, sig=signal.SIGKILL)
    assert (got.rule, got.retryable, got.error_code) == ("killed-by-signal", True, "SIGKILL")
    assert got.cascade_like is False


def test_negative_exit_code_is_read_as_a_signal():
    # Issue 13: a segfault with no hardware, driver or scheduler line is a crash of the
    # program (a bug, a version mismatch), not retried; a SIGKILL is.
    got = classify("", exit_code=-11)
    assert (got.rule, got.error_code, got.retryable) == ("crashed-by-signal", "SIGSEGV", False)
    got = classify("", exit_code=-9)
    assert (got.rule, got.error_code, got.retryable, got.retry_limit) == ("killed-by-signal", "SIGKILL", True, 1)


def test_sigterm_is_cascade_like_because_supervisors_stop_peers_with_it():
    assert classify("", exit_code=143).cascade_like is True


def test_exit_127_without_log_is_command_not_found():
    got = classify("", exit_code=127)
    assert (got.rule, got.retryable) == ("command-not-found", False)


def test_exit_126_without_log_is_command_not_executable():
    got = classify("", exit_code=126)
    assert (got.rule, got.retryable) == ("command-not-executable", False)


def test_no_exit_status_at_all_is_a_lost_instance_and_retryable():
    got = classify("", exit_code=None, sig=None)
    assert (got.rule, got.retryable) == ("exit-status-unknown", True)


@pytest.mark.parametrize("field, value", [("exit_code", "1"), ("exit_code", True), ("signal", 0), ("signal", 200)])
def test_malformed_exit_status_is_rejected_naming_the_field(field, value):
    kwargs = {"exit_code": 1, "signal": None, "log_tail": ""}
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        classify_failure(FailureInput(**kwargs))


def test_every_classification_has_a_plain_cause_and_next_step():
    inputs = [(t, c) for _, c, t in SAMPLES] + [("", 3), ("", -9), ("", 127), ("", 126)]
    for tail, code in inputs:
        got = classify(tail, exit_code=code)
        assert isinstance(got, Classification)
        assert got.cause and got.next_step and got.message


# ---- root cause -------------------------------------------------------------------


def _obs(name, at, tail, code=1):
    role, index = name.split("-")
    return FailureObservation(name, role.capitalize(), int(index), at, classify(tail, exit_code=code))


RESET = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer\n"
BUG = "[rank1]: ValueError: bad batch\n"


def test_earliest_exit_is_the_root_cause():
    a = _obs("worker-0", 100.0, BUG)
    b = _obs("worker-1", 105.0, BUG)
    root, cascades = pick_root_cause([b, a])
    assert root is a and cascades == (b,)


def test_within_a_second_a_real_crash_beats_a_peers_connection_reset():
    reset = _obs("worker-0", 100.0, RESET)
    crash = _obs("worker-1", 100.6, BUG)
    late = _obs("worker-2", 100.9, RESET)
    root, cascades = pick_root_cause([reset, late, crash])
    assert root is crash
    assert cascades == (reset, late)


def test_a_cascade_like_error_more_than_a_second_earlier_stays_the_root():
    reset = _obs("worker-0", 100.0, RESET)
    crash = _obs("worker-1", 101.5, BUG)
    root, _ = pick_root_cause([crash, reset])
    assert root is reset


def test_when_all_are_cascade_like_the_earliest_wins():
    a = _obs("worker-0", 100.2, RESET)
    b = _obs("worker-1", 100.1, RESET)
    assert pick_root_cause([a, b])[0] is b


def test_within_a_second_a_peers_network_error_beats_a_collective_timeout():
    timeout = _obs("worker-0", 100.0, "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)\n")
    reset = _obs("worker-1", 100.4, RESET)
    root, cascades = pick_root_cause([timeout, reset])
    assert root is reset and root.classification.retryable
    assert cascades == (timeout,)
    # alone, or more than a second first, the timeout stays the root cause
    assert pick_root_cause([timeout])[0] is timeout
    assert pick_root_cause([timeout, _obs("worker-1", 101.5, RESET)])[0] is timeout


def test_unknown_exit_times_sort_last():
    known = _obs("worker-0", 100.0, RESET)
    unknown = _obs("worker-1", None, BUG)
    assert pick_root_cause([unknown, known])[0] is known


def test_root_cause_needs_at_least_one_observation():
    with pytest.raises(ValueError, match="observations"):
        pick_root_cause([])


# ---- the literal prefilter ----------------------------------------------------------


def _classify_without_prefilter(monkeypatch, tail, **kw):
    from core import classify as module

    monkeypatch.setattr(module, "_candidates", lambda folded: dict.fromkeys(range(len(LOG_SIGNATURES))))
    return classify(tail, **kw)


@pytest.mark.parametrize("rule, exit_code, tail", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_the_prefilter_never_changes_a_classification(monkeypatch, rule, exit_code, tail):
    with_prefilter = classify(tail, exit_code=exit_code)
    assert _classify_without_prefilter(monkeypatch, tail, exit_code=exit_code) == with_prefilter


@pytest.mark.parametrize("rule, exit_code, tail", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_each_required_literal_set_is_met_by_every_match(rule, exit_code, tail):
    from core.classify import prepare_tail, required_literals

    text = prepare_tail(tail)
    folded = text.casefold()
    for sig in LOG_SIGNATURES:
        if sig.pattern.search(text):
            for literals in required_literals(sig.pattern):
                assert any(lit in folded for lit in literals), (sig.rule, literals)


def test_almost_every_log_signature_has_a_required_literal():
    # Only the generic exception (whose literals are "rror"/"xception") may be weak; every
    # other signature is skipped unless one of its literals occurs in the tail.
    from core.classify import required_literals

    for sig in LOG_SIGNATURES:
        requirements = required_literals(sig.pattern)
        assert requirements, sig.rule
        assert max(min(map(len, r)) for r in requirements) >= 4 or not sig.specific, sig.rule


def _can_match_a_newline(items, flags) -> bool:
    from re import _constants as c  # type: ignore[attr-defined]  # CPython 3.11+ private; typeshed omits it

    for op, av in items:
        if op is c.LITERAL and av == 10 or op is c.NOT_LITERAL and av != 10:
            return True
        if op is c.ANY and flags & re.DOTALL:
            return True
        if op is c.IN:
            negated = any(o is c.NEGATE for o, _ in av)
            hit = any(
                o is c.LITERAL
                and a == 10
                or o is c.RANGE
                and a[0] <= 10 <= a[1]
                or o is c.CATEGORY
                and a
                in (
                    c.CATEGORY_SPACE,
                    c.CATEGORY_NOT_DIGIT,
                    c.CATEGORY_NOT_WORD,
                    c.CATEGORY_UNI_SPACE,
                    c.CATEGORY_UNI_NOT_DIGIT,
                    c.CATEGORY_UNI_NOT_WORD,
                )
                for o, a in av
            )
            if hit != negated:
                return True
        if op is c.SUBPATTERN and _can_match_a_newline(av[-1], flags | av[1]):
            return True
        if op is c.BRANCH and any(_can_match_a_newline(b, flags) for b in av[1]):
            return True
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and _can_match_a_newline(av[2], flags):
            return True
        if op in (c.ASSERT, c.ATOMIC_GROUP) and _can_match_a_newline(av[-1], flags):
            return True
    return False


def test_no_catalog_pattern_matches_across_a_line_end():
    # The classifier searches only the lines that hold a signature's literal; a pattern
    # that could span lines would be missed there.
    from re import _parser

    for sig in LOG_SIGNATURES:
        assert not _can_match_a_newline(_parser.parse(sig.pattern.pattern, sig.pattern.flags), sig.pattern.flags), (
            sig.rule
        )
    assert _can_match_a_newline(_parser.parse(r"a\sb", 0), 0)
    assert _can_match_a_newline(_parser.parse(r"a[^x]b", 0), 0)
    assert not _can_match_a_newline(_parser.parse(r"a[^\n]{0,9}b", 0), 0)


def test_a_tail_that_case_folding_lengthens_is_still_classified_at_its_last_line(monkeypatch):
    tail = "Straße ßß: Connection refused, retrying\n" * 3 + "Traceback (most recent call last):\nValueError: größe ß\n"
    got = classify(tail)
    assert got.message == "ValueError: größe ß"
    tail += "RuntimeError: Connection refused (Straße)\n"
    got = classify(tail)
    assert (got.rule, got.message) == (
        "connection-refused",
        "A connection was refused: RuntimeError: Connection refused (Straße)",
    )
    assert _classify_without_prefilter(monkeypatch, tail) == got


# ---- lines of the corpus's families in the forms other tools print (issue 13) ----------

GENERALISED_LINES = [
    # network: Go programs (containerd, kubelet, registries' clients) print errno texts lower-cased
    (
        "connection-reset",
        True,
        'Failed to pull image "nvcr.io/nvidia/pytorch:24.01-py3": rpc error: code = Unknown desc = failed to pull and '
        "unpack image: failed to copy: read tcp 10.0.0.5:51234->1.2.3.4:443: read: connection reset by peer",
    ),
    ("connection-refused", True, "dial tcp 10.96.0.10:53: connect: connection refused"),
    (
        "grpc-unavailable",
        True,
        "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with: "
        'status = StatusCode.UNAVAILABLE details = "Socket closed"',
    ),
    (
        "nccl-message-truncated",
        False,
        "node-1:88:120 [0] transport/net_socket.cc:424 NCCL WARN NET/Socket : peer 10.0.0.2<59210> message truncated : "
        "receiving 1048576 bytes instead of 65536",
    ),
    # external services and registries, in curl's, git's, botocore's and google-api-core's words
    (
        "service-unavailable",
        True,
        "fatal: unable to access 'https://github.com/org/repo.git/': The requested URL returned error: 502",
    ),
    (
        "service-unavailable",
        True,
        "botocore.exceptions.ClientError: An error occurred (503) when calling the HeadObject operation "
        "(reached max retries: 4): Service Unavailable",
    ),
    (
        "service-denied",
        False,
        "botocore.exceptions.ClientError: An error occurred (403) when calling the HeadObject operation: Forbidden",
    ),
    ("service-denied", False, "curl: (22) The requested URL returned error: 404"),
    ("service-denied", False, "botocore.exceptions.NoCredentialsError: Unable to locate credentials"),
    (
        "connection-dropped",
        True,
        "botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
        '"https://bucket.s3.us-east-1.amazonaws.com/ckpt/step_1000.pt"',
    ),
    (
        "connection-dropped",
        True,
        "error: RPC failed; curl 56 GnuTLS recv error (-9): A TLS packet with unexpected length was received.",
    ),
    (
        "connection-dropped",
        True,
        "urllib3.exceptions.ProtocolError: ('Connection broken: IncompleteRead(0 bytes read, 512 more expected)', "
        "IncompleteRead(0 bytes read, 512 more expected))",
    ),
    ("service-timeout", True, "google.api_core.exceptions.DeadlineExceeded: 504 Deadline Exceeded"),
    # ssl's read timing out under Python 3.6's name for it (hail-is/hail#8390, pip in a docker build)
    ("service-timeout", True, "socket.timeout: The read operation timed out"),
    # Winsock's words for the same socket errors (wandb/wandb#4331; Windows' FormatMessage texts)
    (
        "connection-reset",
        True,
        "ConnectionResetError: [WinError 10054] An existing connection was forcibly closed by the remote host",
    ),
    (
        "connection-refused",
        True,
        "ConnectionRefusedError: [WinError 10061] No connection could be made because the target machine actively "
        "refused it",
    ),
    (
        "connection-timed-out",
        True,
        "TimeoutError: [WinError 10060] A connection attempt failed because the connected party did not properly "
        "respond after a period of time, or established connection failed because connected host has failed to respond",
    ),
    ("no-route-to-host", True, "OSError: [WinError 10065] A socket operation was attempted to an unreachable host"),
    (
        "connection-dropped",
        True,
        "ConnectionAbortedError: [WinError 10053] An established connection was aborted by the software in your "
        "host machine",
    ),
    (
        "image-not-found",
        False,
        'Failed to pull image "ghcr.io/org/trainer:v9": rpc error: code = NotFound desc = failed to pull and unpack '
        'image "ghcr.io/org/trainer:v9": failed to resolve reference "ghcr.io/org/trainer:v9": '
        "ghcr.io/org/trainer:v9: not found",
    ),
    (
        "service-rate-limited",
        True,
        'Failed to pull image "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime": pull QPS exceeded.',
    ),
    # preemption and the scheduler's own kills
    (
        "cloud-preemption-notice",
        True,
        "Conditions:\n  Type              Status  Reason\n  DisruptionTarget  True    PreemptionByScheduler",
    ),
    (
        "cloud-preemption-notice",
        True,
        "  DisruptionTarget  True    DeletionByTaintManager  Taint manager: deleting due to NoExecute taint",
    ),
    (
        "cloud-preemption-notice",
        True,
        '"methodName": "compute.instances.preempted", "resourceName": "projects/p/zones/us-central1-a/instances/w-1"',
    ),
    ("oom-killed", False, "srun: error: node017: task 3: Out Of Memory"),
    # gpu: nvidia-smi and the driver on a GPU they can no longer reach
    ("gpu-fallen-off-bus", True, "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error"),
    ("gpu-fallen-off-bus", True, "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0xffff:1307)"),
    (
        "nccl-ofi-register-failed",
        False,
        "register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 4. RC: -22, "
        "Error: Invalid argument",
    ),
    # a BProc compute node's daemon that lost its master (corpus network-022), and the
    # kernel's memory report that only a node-wide OOM prints (corpus signals-023)
    ("node-died", True, "Jun 15 11:24:26 n1 bpslave-0: Ping timeout after 64 seconds - lost connection to master?"),
    ("oom-killer", True, "Mar 10 01:33:03 cpu-6-2 kernel: Free swap  = 0kB"),
]


@pytest.mark.parametrize(
    "rule, retryable, line", GENERALISED_LINES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(GENERALISED_LINES)]
)
def test_a_familys_line_in_another_tools_words_is_classified_by_its_family(rule, retryable, line):
    got = classify(line + "\n")
    assert (got.rule, got.retryable) == (rule, retryable)


# Issue 26 (second training gathering): CUDA's unknown error in the words of the runtimes
# before CUDA 10.1 (cudaErrorUnknown was 30) and of the driver API. A line from the training
# entries (corpus gpu-200, gpu-201), and look-alikes that name an unknown error of something
# else or another CUDA status, which must not match.
@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: cuda runtime error (30) : unknown error at /opt/conda/conda-bld/pytorch/work/aten/src/THC/"
        "THCGeneral.cpp:51",
        "THCudaCheck FAIL file=/tmp/luarocks_cutorch-scm-1-3687/cutorch/lib/THC/THCGeneral.c line=70 error=30 : "
        "unknown error",
        "tensorflow.python.framework.errors_impl.InternalError: failed call to cuInit: CUDA_ERROR_UNKNOWN: unknown error",
    ],
)
def test_cudas_unknown_error_in_the_older_runtimes_words_is_the_gpu(line):
    got = classify(line + "\n")
    assert (got.rule, got.retryable, got.family) == ("cuda-unknown-error", True, "gpu")


@pytest.mark.parametrize(
    "line",
    [
        "nvidia-container-cli: detection error: nvml error: unknown error: unknown",
        "RuntimeError: cuda runtime error (3) : initialization error at /pytorch/aten/src/THC/THCGeneral.cpp:50",
        "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=51 error=300 : unknown error",
        "RuntimeError: Unknown error -1",
    ],
)
def test_another_unknown_error_or_cuda_status_is_not_cudas_unknown_error(line):
    assert classify(line + "\n").rule != "cuda-unknown-error"


# Issue 26 (second training gathering): a layer download that broke off, in the docker
# daemon's and the v1 pull's words. A line from the training entry (corpus startup-201) and
# the daemon's own retry line; look-alikes: a missing tag, a rate limit, a truncated file.
@pytest.mark.parametrize(
    "line",
    [
        "[10.0.104.20] eb8d8bd629e3: Error pulling image (1447) from docker.xxx.com/app, endpoint: "
        "https://docker.xxx.com/v1/, ApplyLayer exit status 1 unexpected EOF",
        'May 05 08:00:31 host dockerd[1371075]: time="2021-05-05T08:00:31Z" level=info msg="Download failed, '
        'retrying (3/5): unexpected EOF"',
        'time="2020-03-19T16:56:14.793901390Z" level=error msg="Download failed, retrying: unexpected EOF"',
    ],
)
def test_a_layer_download_that_broke_off_is_retried(line):
    got = classify(line + "\n")
    assert (got.rule, got.retryable, got.family) == ("image-layer-download-failed", True, "startup")


@pytest.mark.parametrize(
    "line",
    [
        "Error response from daemon: manifest for ubuntu:99.04 not found: manifest unknown: manifest unknown",
        "Error response from daemon: toomanyrequests: You have reached your pull rate limit.",
        "RuntimeError: unexpected EOF, expected 8 more bytes. The file might be corrupted.",
        "eb8d8bd629e3: Download complete",
    ],
)
def test_a_missing_image_a_rate_limit_or_a_truncated_file_is_not_a_broken_layer_download(line):
    assert classify(line + "\n").rule != "image-layer-download-failed"


# Issue 26 (second training gathering): a cloud out of capacity for the machine type
# (retried) and an account whose quota is too small (not): lines from the training entries
# (corpus startup-204, startup-205) and the clouds' own documented words; look-alikes: a rate
# limit named RequestLimitExceeded, a pod waiting for GPUs, a size the region does not offer.
@pytest.mark.parametrize(
    "line, rule, retryable",
    [
        (
            'FailureReason: "CapacityError: Unable to provision requested ML compute capacity. Please retry using a '
            'different ML instance type."',
            "cloud-capacity-unavailable",
            True,
        ),
        (
            "An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation: We currently "
            "do not have sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a).",
            "cloud-capacity-unavailable",
            True,
        ),
        (
            "ERROR: (gcloud.compute.instances.create) Could not fetch resource: - The zone 'projects/p/zones/"
            "us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, "
            "or try again later.",
            "cloud-capacity-unavailable",
            True,
        ),
        (
            "ResourceLimitExceeded: An error occurred (ResourceLimitExceeded) when calling the CreateTrainingJob "
            "operation: The account-level service limit 'ml.p3.2xlarge for training job usage' is 0 Instances",
            "cloud-quota-exceeded",
            False,
        ),
        (
            "- Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region us-central1.",
            "cloud-quota-exceeded",
            False,
        ),
    ],
)
def test_a_cloud_out_of_capacity_is_retried_and_a_quota_too_small_is_not(line, rule, retryable):
    got = classify(line + "\n")
    assert (got.rule, got.retryable, got.family) == (rule, retryable, "startup")


@pytest.mark.parametrize(
    "line",
    [
        "botocore.exceptions.ClientError: An error occurred (RequestLimitExceeded) when calling the "
        "DescribeInstances operation: Request limit exceeded.",
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        "The requested size for resource '/subscriptions/x/virtualMachines/vm0' is currently not available in "
        "location 'westeurope'. (Code: SkuNotAvailable)",
    ],
)
def test_a_rate_limit_a_pending_pod_or_an_unoffered_size_is_neither_capacity_nor_quota(line):
    assert classify(line + "\n").rule not in ("cloud-capacity-unavailable", "cloud-quota-exceeded")


# Issue 26 (second training gathering): W&B's server not answering wandb.init() in time is a
# service timeout (corpus external-services-202); W&B refusing the request is not.
@pytest.mark.parametrize(
    "line",
    [
        "CommError: Run initialization has timed out after 90.0 sec. ",
        "wandb: ERROR Run initialization has timed out after 600 sec. Please try increasing the timeout with the "
        "`init_timeout` setting",
    ],
)
def test_wandb_init_timing_out_is_a_service_timeout(line):
    got = classify(line + "\n")
    assert (got.rule, got.retryable) == ("service-timeout", True)


def test_wandb_refusing_the_project_is_not_a_service_timeout():
    line = (
        "wandb.errors.CommError: It appears that you do not have permission to access the requested resource. "
        "Please reach out to the project owner to grant you access. (Error 404: Not Found)"
    )
    assert classify(line + "\n").rule != "service-timeout"
