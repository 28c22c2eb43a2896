"""Issue 26's fifth round of signatures: failures a restart does not fix that fell to the fallbacks
(the bare exit code, the generic exception), read from what the program or library prints in its
own words, and the transient look-alikes each must leave alone.

Every log line here is an excerpt of a real message; the comment above it names where it comes
from (a corpus training entry by id, or the public thread). A look-alike is asserted not to be
read by the signature (and, where its own reading is known, to be read by that one)."""

from __future__ import annotations

import pytest

from core import catalog
from core.classify import ErrorSource, FailureInput, classify_failure


def classify(tail: str, exit_code: int | None = 1, sig: int | None = None):
    return classify_failure(FailureInput(exit_code, sig, tail))


def assert_bug(tail: str, rule: str, exit_code: int | None = 1):
    got = classify(tail, exit_code)
    assert (got.rule, got.retryable, got.source) == (rule, False, ErrorSource.LOG), got.message
    sig = catalog.signature(rule)
    assert got.cause == sig.cause and got.next_step == sig.next_step
    assert "\n" not in got.message and got.message.startswith(sig.message)
    return got


# ---- a program's rejected arguments -------------------------------------------------------------

ARGPARSE_BABYLM = (
    # babylm/baseline-pretraining#2 (corpus user-error-401): torch.distributed.launch's --local-rank
    "usage: general_train.py\n"
    "       [-h]\n"
    "       [--setting SETTING]\n"
    "       [--local_rank LOCAL_RANK]\n"
    "general_train.py: error: unrecognized arguments: --local-rank=0\n"
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 0 (pid: 3049) of "
    "binary: /usr/bin/python3\n"
)


@pytest.mark.parametrize(
    "tail",
    [
        ARGPARSE_BABYLM,
        # hkchengrex/XMem#18 (corpus user-error-400)
        "train.py: error: unrecognized arguments: --local_rank=0\n",
        # sounakdey/SigNet#17: a required argument missing
        "usage: SigNet_v1.py [-h] --dataset DATASET [--epoch EPOCH]\n"
        "                    [--num_samples NUM_SAMPLES] [--batch_size BATCH_SIZE]\n"
        "SigNet_v1.py: error: the following arguments are required: --dataset/-ds\n",
        # brainglobe/brainglobe-atlasapi#81: click's usage and its error
        "Usage: brainglobe [OPTIONS] COMMAND\nTry 'brainglobe --help' for help.\n\nError: no such option: -h\n",
        # clicheio/cliche#30: click 5's form, without the "Try" line
        "Usage: cliche [OPTIONS] COMMAND [ARGS]...\nError: no such option: -c\n",
    ],
    ids=["argparse-usage-then-error", "argparse-bare", "argparse-required", "click-8", "click-5"],
)
def test_a_parser_that_rejects_the_arguments_is_arguments_rejected(tail):
    got = assert_bug(tail, "arguments-rejected", exit_code=2)
    assert "error" in got.message.lower()


def test_arguments_rejected_names_the_line_and_says_what_to_fix():
    got = assert_bug(ARGPARSE_BABYLM, "arguments-rejected", exit_code=2)
    assert got.message == (
        "The program's arguments were rejected: general_train.py: error: unrecognized arguments: --local-rank=0"
    )
    assert "--local-rank" in got.next_step and "LOCAL_RANK" in got.next_step


@pytest.mark.parametrize(
    "tail",
    [
        # snakemake/snakemake-executor-plugin-slurm#225: srun's own "error:" lines
        "srun: error: Task launch for StepId=125452.4 failed on node [NODENAME]: Unable to layout tasks on given cpus\n"
        "srun: error: Application launch failed: Unable to layout tasks on given cpus\n"
        "srun: Job step aborted\n",
        # rwth-i6/sisyphus#156: sbatch while the controller was busy (it retries)
        "[2023-11-23 10:52:11,445] ERROR: Error: sbatch: error: Slurm temporarily unable to accept job, sleeping and "
        "retrying\n",
        # marbl/canu#1154 (corpus startup-403, retryable): the controller unavailable for a while
        "slurm_load_jobs error: Socket timed out on send/recv operation\n",
    ],
    ids=["srun-error", "sbatch-error", "slurm-load-jobs"],
)
def test_a_schedulers_own_error_lines_are_not_rejected_arguments(tail):
    assert classify(tail).rule != "arguments-rejected"


# ---- a configuration the config system rejects --------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # hydra-ecosystem/hydra#1912 (corpus user-error-406): a misspelt key in an override
        "Could not override 'perferences.trait'.\n"
        "To append to your config use +perferences.trait=i_like_stars\n"
        "Key 'perferences' is not in struct\n"
        "    full_key: perferences\n"
        "    object_type=dict\n",
        # lipzh5/X2CNet#2 (corpus user-error-408): the code reads a key the config lacks
        "omegaconf.errors.ConfigAttributeError: Key 'pred_delta_from_neutral' is not in struct\n"
        "    full_key: train.pred_delta_from_neutral\n"
        "    object_type=dict\n"
        "\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
        # ChenhongyiYang/QueryDet-PyTorch#46 (corpus user-error-416): YAML that does not parse
        "Exception has occurred: ScannerError\n"
        "mapping values are not allowed here\n"
        '  in "/home/xxx/project/QueryDet-PyTorch-main/models/config.py", line 5, column 29\n',
        # DataDog/integrations-core#2758: a tab in a YAML file
        "yaml.scanner.ScannerError: while scanning for the next token\n"
        "found character '\\t' that cannot start any token\n"
        '  in "<unicode string>", line 6, column 3:\n',
        # hydra-ecosystem/hydra#2588: a structured config without the key
        "omegaconf.errors.ConfigKeyError: Key 'training' not in 'ModelConfig'\n",
    ],
    ids=["hydra-override", "omegaconf-struct", "yaml-mapping", "yaml-tab", "structured-config"],
)
def test_a_rejected_configuration_is_config_invalid(tail):
    assert_bug(tail, "config-invalid")


@pytest.mark.parametrize(
    "tail, rule",
    [
        # Hydra's line before any failed job (lipzh5/X2CNet#2, corpus user-error-408), here followed by
        # a hub 504 that cleared (huggingface/huggingface_hub#1516)
        (
            "Error executing job with overrides: ['train.batch_size=128', 'train.num_workers=16', "
            "'train.num_epochs=100', 'train.lr=1e-3']\n"
            "HfHubHTTPError: 504 Server Error: Gateway Time-out for url: "
            "https://huggingface.co/api/models/Antreas/timm-ade20k-debug-138/commit/main\n",
            "service-unavailable",
        ),
        # bugsuse/pytropomi#2 (corpus external-services-405, retryable): JSON that was not JSON while the
        # service was down
        ("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n", "python-exception"),
    ],
    ids=["hydra-job-line", "json-decode"],
)
def test_hydras_job_line_and_json_that_does_not_decode_are_not_config_invalid(tail, rule):
    assert classify(tail).rule == rule


# ---- packages the resolver cannot install --------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # LevinRoman/tabular-transfer-learning#1 (corpus external-services-401): pins that conflict
        "ERROR: Cannot install -r requirements.txt (line 14) and torch~=1.10.0 because these package versions have "
        "conflicting dependencies.\n\nThe conflict is caused by:\n    The user requested torch~=1.10.0\n"
        "    torchvision 0.8.2 depends on torch==1.7.1\n\n"
        "ERROR: ResolutionImpossible: for help visit "
        "https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts\n",
        # cheniison/e2e-coref-pytorch#1 (corpus external-services-022): a version the index does not list
        "ERROR: Could not find a version that satisfies the requirement torch==1.15.0 (from versions: 0.1.2, "
        "0.1.2.post1, 0.1.2.post2, 0.3.1, 0.4.0, 0.4.1, 1.0.0, 1.0.1, 1.0.1.post2, 1.1.0, 1.2.0, 1.3.0, 1.3.1, 1.4.0, "
        "1.5.0, 1.5.1, 1.6.0)\nERROR: No matching distribution found for torch==1.15.0\n",
        # ali-vilab/MangaNinjia#5 (corpus external-services-408): build hashes conda's channels do not have
        "Solving environment: failed\n\nPackagesNotFoundError: The following packages are not available from "
        "current channels:\n\n  - python==3.10.14=h955ad1f_1\n",
    ],
    ids=["pip-conflict", "pip-version-not-listed", "conda-not-found"],
)
def test_requirements_the_index_cannot_satisfy_are_package_resolution_failed(tail):
    assert_bug(tail, "package-resolution-failed")


def test_package_resolution_names_the_requirements_in_conflict():
    # invoke-ai/InvokeAI#532 (corpus external-services-400): the line that names the conflict, not pip's
    # closing "ResolutionImpossible: for help visit <url>", is the one the user reads
    tail = (
        "ERROR: Cannot install -r requirements-mac.txt (line 14), -r requirements-mac.txt (line 6) and torch==1.12.1 "
        "because these package versions have conflicting dependencies.\n\n"
        "The conflict is caused by:\n"
        "    The user requested torch==1.12.1\n"
        "    kornia 0.6.0 depends on torch>=1.8.1\n"
        "    torchvision 0.13.0 depends on torch==1.12.0\n\n"
        "ERROR: ResolutionImpossible: for help visit "
        "https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts\n"
    )
    got = assert_bug(tail, "package-resolution-failed")
    assert "torch==1.12.1 because these package versions have conflicting dependencies" in got.message


@pytest.mark.parametrize(
    "tail",
    [
        # pypa/pip#11350 (corpus external-services-403, retryable): PyPI answered empty pages for a while
        "WARNING: Skipping page https://pypi.org/simple/flask/ because the GET request got Content-Type: .The only "
        "supported Content-Type is text/html\n\n"
        "ERROR: Could not find a version that satisfies the requirement flask==2.0.3 (from my-lib) (from versions: "
        "none)\n\nERROR: No matching distribution found for flask==2.0.3\n",
        # pypa/pip#5999: old pip after a read that timed out, "(from versions: )"
        "  Could not fetch URL https://pypi.python.org/simple/flexget/: connection error: "
        "HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. - skipping\n"
        "  Could not find a version that satisfies the requirement flexget (from versions: )"
        "                                           \n"
        "Cleaning up...\n"
        "No matching distribution found for flexget\n",
    ],
    ids=["from-versions-none", "from-versions-empty"],
)
def test_an_index_that_answered_nothing_is_not_package_resolution_failed(tail):
    assert classify(tail).rule != "package-resolution-failed"


# ---- cuDNN / cuBLAS refusing a call -------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # tbennun/cudnn-training#17 (corpus gpu-401)
        "CUDNN failure: CUDNN_STATUS_BAD_PARAM\n/home/admin/cudnn-training-master/lenet.cu:658\nAborting...\n",
        # pppLang/SKNet#14
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
        "non-contiguous input.\n",
    ],
    ids=["bad-param", "not-supported"],
)
def test_cudnn_refusing_the_parameters_is_a_rejected_call(tail):
    assert_bug(tail, "cuda-library-rejected-call")


@pytest.mark.parametrize(
    "tail",
    [
        # rowanz/neural-motifs#95: went away on another machine
        "RuntimeError: CUDNN_STATUS_EXECUTION_FAILED\n",
        # tensorflow/tensorflow#2033
        "E tensorflow/stream_executor/cuda/cuda_dnn.cc:385] could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR\n",
    ],
    ids=["execution-failed", "internal-error"],
)
def test_cudnn_failing_to_run_is_not_a_rejected_call(tail):
    assert classify(tail).rule != "cuda-library-rejected-call"


# ---- shapes, devices and checkpoints that do not fit ---------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # SCLBD/MCG-Blackbox#5 (corpus user-error-009): printed by a wrapper, no traceback
        "Error: size mismatch for flow.layers.1.actnorm.x_Linear.0.weight: copying a param with shape "
        "torch.Size([128, 1024]) from checkpoint, the shape in current model is torch.Size([128, 50176]).\n",
        # bentrevett/pytorch-pos-tagging#5 (corpus user-error-011)
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n",
        # nanoporetech/dorado#97 (corpus user-error-409): libtorch's message under C++'s terminate
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  shape '[24, 6, -1, 5]' is invalid for input of size 36864\n",
    ],
    ids=["state-dict", "devices", "libtorch-view"],
)
def test_shapes_devices_or_checkpoints_that_do_not_fit_are_shape_mismatch(tail):
    assert_bug(tail, "shape-mismatch")


def test_a_checkpoint_that_does_not_read_is_not_a_shape_mismatch():
    # sml2h3/dddd_trainer#36 (corpus storage-020): a truncated checkpoint is a storage failure
    tail = "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory\n"
    assert classify(tail).rule != "shape-mismatch"


# ---- collectives the ranks disagree on ----------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # Lightning-AI/pytorch-lightning#19106 (corpus collective-timeout-003)
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=21, OpType=BROADCAST, TensorShape=[1], TensorDtypes=Long, "
        "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
        "requires_grad=false (default), pinned_memory=false (default), memory_format\n",
        # NVIDIA/nccl#296 (corpus collective-timeout-020)
        "init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around "
        "rank 39. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs\n",
    ],
    ids=["torch-debug", "nccl"],
)
def test_collectives_the_ranks_disagree_on_are_a_collective_mismatch(tail):
    assert_bug(tail, "collective-mismatch")


# ---- compiled extensions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # rusty1s/pytorch_sparse#29 (corpus user-error-018): no traceback, the linker's words alone
        "miniconda3/lib/python3.6/site-packages/torch_sparse/unique_cuda.cpython-36m-x86_64-linux-gnu.so: "
        "undefined symbol: _ZN3c106Device8validateEv\n",
        # pytorch/pytorch#14087 (corpus user-error-016): the import error's line, read for its cause
        "ImportError: /home/shobjain/python27/local/lib/python2.7/site-packages/torch/_C.so: undefined symbol: "
        "_ZN5torch3jit5Value13setUniqueNameERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESa\n",
    ],
    ids=["bare", "import-error"],
)
def test_an_extension_built_for_other_libraries_is_an_abi_mismatch(tail):
    got = assert_bug(tail, "extension-abi-mismatch")
    assert "reinstall" in got.next_step


@pytest.mark.parametrize(
    "tail",
    [
        # casperg92/MaSIF_colab#7: torchvision's warning at import, after which the program runs on
        "/usr/local/lib/python3.9/dist-packages/torchvision/io/image.py:13: UserWarning: Failed to load image Python "
        "extension: '/usr/local/lib/python3.9/dist-packages/torchvision/image.so: undefined symbol: "
        "_ZN3c104impl8GPUTrace13gpuTraceStateE'If you don't plan on using image functionality from `torchvision.io`, "
        "you can ignore this warning. Otherwise, there might be something wrong with your environment. Did you have "
        "`libjpeg` or `libpng` installed before building `torchvision` from source?\n"
        "  warn(\n",
        # NixOS/nixpkgs#162286: the same warning in torchvision 0.13's words
        "/home/octopus/workdir/lib/python3.10/site-packages/torchvision/io/image.py:13: UserWarning: Failed to load "
        "image Python extension: /home/octopus/workdir/lib/python3.10/site-packages/torchvision/image.so: undefined "
        "symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs\n"
        '  warn(f"Failed to load image Python extension: {e}")\n',
    ],
    ids=["torchvision-0.15", "torchvision-0.13"],
)
def test_a_warning_about_an_optional_extension_is_not_an_abi_mismatch(tail):
    assert classify(tail).rule != "extension-abi-mismatch"


def test_a_module_that_is_not_installed_stays_an_import_error():
    # NVlabs/hymba#6 (corpus user-error-024)
    tail = (
        "ImportError: cannot import name 'is_torch_greater_or_equal_than_1_13' from 'transformers.pytorch_utils' "
        "(/home/toolkit/.conda/envs/new_baseline_env/lib/python3.10/site-packages/transformers/pytorch_utils.py)\n"
    )
    assert classify(tail).rule == "python-import-error"


@pytest.mark.parametrize(
    "tail",
    [
        # ucbdrive/few-shot-object-detection#11 (corpus startup-400)
        "nvcc fatal   : Unsupported gpu architecture 'compute_61\nerror: command '/usr/bin/nvcc' failed with exit "
        "status 1\n",
        # Ruyi-Zha/naf_cbct#15
        "nvcc fatal: Unsupported gpu architecture 'compute_86' ninja: build stopped: subcommand failed\n",
    ],
    ids=["nvcc-setuptools", "nvcc-ninja"],
)
def test_an_extension_that_does_not_compile_is_a_build_failure(tail):
    assert_bug(tail, "extension-build-failed")


@pytest.mark.parametrize(
    "tail",
    [
        # spdx/spdx-online-tools#232: pip's git clone that failed during an install
        "ERROR: Command errored out with exit status 128: git clone -q git://github.com/spdx/spdx-license-matcher.git "
        "/opt/spdx/spdx-online-tools/venv/src/spdx-license-matcher Check the logs for full command output.\n",
        # ro-py/ro.py#77: the same, unable to connect, in pip 22's words
        "  fatal: unable to connect to github.com:\n"
        "  github.com[0: 140.82.113.4]: errno=Unknown error\n"
        "\n"
        "  error: subprocess-exited-with-error\n",
    ],
    ids=["pip-git-clone", "pip-git-unreachable"],
)
def test_a_command_other_than_a_compiler_failing_is_not_an_extension_build(tail):
    assert classify(tail).rule != "extension-build-failed"


# ---- an instruction the CPU does not have -------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        # informagi/REL#53 (corpus signals-203) and tensorflow/tensorflow#19104 (corpus signals-401)
        "Illegal instruction (core dumped)\n",
        # tensorflow/tensorflow#28032: zsh's words
        "5526 illegal hardware instruction (core dumped) python3\n",
        # QMCPACK/qmcpack#2096 (corpus signals-403): mpirun's report of a rank built for Intel CPUs on AMD
        "mpirun noticed that process rank 1 with PID 6547 on node ip-172-31-41-193 exited on signal 4 (Illegal "
        "instruction).\n",
        # hpcugent/vsc_user_docs#535 (corpus signals-404): bash's padded report with the command after it
        "/apps/gent/RHEL8/skylake-ib/software/worker/1.6.12-foss-2021b/bin/wsub: line 27: 488851 Illegal instruction     "
        '(core dumped) ${PERL} ${DIR}/../lib/wsub.pl "$@"\n',
    ],
    ids=["bash", "zsh", "mpirun", "bash-padded"],
)
def test_an_illegal_instruction_is_a_binary_built_for_another_cpu(tail):
    assert_bug(tail, "illegal-instruction")


def test_a_gpu_kernels_illegal_instruction_is_not_the_cpus():
    # the CUDA runtime's cudaErrorIllegalInstruction text
    assert classify("RuntimeError: CUDA error: an illegal instruction was encountered\n").rule == "cuda-kernel-fault"


# ---- native code that aborted -------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail, exit_code",
    [
        # pytorch/pytorch#76229: libtorch's internal assert as an uncaught c10::Error
        (
            "terminate called after throwing an instance of 'c10::Error'\n"
            '  what():  _ivalue_INTERNAL ASSERT FAILED at "../torch/csrc/jit/api/object.h":35, please report a bug '
            "to PyTorch. \n",
            134,
        ),
        # chuanqi305/MobileNet-SSD#180: a Caffe CHECK
        (
            "F0407 01:31:07.673615  5759 math_functions.cpp:250] Check failed: a <= b (0 vs. -1.19209e-07) \n"
            "*** Check failure stack trace: ***\n",
            134,
        ),
        # open-mmlab/mmdetection#912: a CUDA kernel's assert() on a label out of range
        (
            "/opt/conda/conda-bld/pytorch_1532584813488/work/aten/src/THCUNN/ClassNLLCriterion.cu:56: void "
            "ClassNLLCriterion_updateOutput_no_reduce_kernel(int, THCDeviceTensor<Dtype, 2, int, DefaultPtrTraits>, "
            "THCDeviceTensor<long, 1, int, DefaultPtrTraits>, THCDeviceTensor<Dtype, 1, int, DefaultPtrTraits>, Dtype "
            "*, int, int) [with Dtype = float]: block: [0,0,0], thread: [32,0,0] Assertion `cur_target >= 0 && "
            "cur_target < n_classes` failed.\n",
            1,
        ),
    ],
    ids=["terminate", "glog-check", "assert"],
)
def test_native_code_that_aborted_on_its_own_check_is_native_abort(tail, exit_code):
    got = assert_bug(tail, "native-abort", exit_code=exit_code)
    assert got.message.startswith("The program aborted in native code: ")


def test_native_abort_shows_the_exceptions_message():
    # pytorch/pytorch#76229: the what() line, the later one, is the message the user reads
    got = classify(
        "terminate called after throwing an instance of 'c10::Error'\n"
        '  what():  _ivalue_INTERNAL ASSERT FAILED at "../torch/csrc/jit/api/object.h":35, please report a bug to '
        "PyTorch. \n",
        134,
    )
    assert got.rule == "native-abort" and "_ivalue_INTERNAL ASSERT FAILED" in got.message


@pytest.mark.parametrize(
    "tail, rule",
    [
        # NVIDIA/Megatron-LM#935: the watchdog's timeout under terminate is read by its own signature
        (
            "terminate called after throwing an instance of 'c10::DistBackendError'\n"
            "  what():  [PG 1 Rank 7] Process group watchdog thread terminated with exception: [Rank 7] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=199, OpType=_REDUCE_SCATTER_BASE, "
            "NumelIn=7098994688, NumelOut=443687168, Timeout(ms)=600000) ran for 882725 milliseconds before timing "
            "out.\n",
            "nccl-watchdog-timeout",
        ),
        # BVLC/caffe#6969: a CHECK on a status the device also gives (EXECUTION_FAILED)
        (
            "F0911 17:48:42.539149 17301 cudnn_softmax_layer.cu:20] Check failed: status == CUDNN_STATUS_SUCCESS (8 vs. "
            "0)  CUDNN_STATUS_EXECUTION_FAILED\n",
            None,
        ),
    ],
    ids=["watchdog-what", "check-on-execution-failed"],
)
def test_native_abort_leaves_what_a_finer_or_a_runtime_reading_says(tail, rule):
    got = classify(tail, 134)
    assert got.rule != "native-abort"
    if rule is not None:
        assert got.rule == rule


def test_native_abort_leaves_a_thread_that_could_not_be_started_for_the_moment():
    # zekyll/OMPEval#16: "sometimes" std::system_error from starting a thread (EAGAIN, the process limit)
    tail = "terminate called after throwing an instance of 'std::system_error'\n  what():  Resource temporarily unavailable\n"
    assert classify(tail, 134).rule != "native-abort"
    # ggml-org/llama.cpp#17168: libc++'s words for the same
    tail = (
        "libc++abi: terminating due to uncaught exception of type std::__1::system_error: thread constructor failed: "
        "Resource temporarily unavailable\n"
    )
    assert classify(tail, 134).rule != "native-abort"


def test_a_terminate_line_alone_leaves_the_line_above_it_to_say_why():
    # test_classify's realistic watchdog tail: PyTorch's timeout line, then libstdc++'s terminate line
    # with no what() after it (the log cut there); the terminate line says only that it was not caught
    from core.tests.test_classify import SAMPLES

    tail = next(t for rule, _, t in SAMPLES if rule == "nccl-watchdog-timeout")
    assert tail.rstrip("\n").endswith("terminate called after throwing an instance of 'c10::DistBackendError'")
    assert classify(tail, 134).rule == "nccl-watchdog-timeout"


# ---- readings widened in this round -------------------------------------------------------------


@pytest.mark.parametrize(
    "tail, rule",
    [
        # hiyouga/LlamaFactory#2172 (corpus nan-016): DeepSpeed's fp16 loss scale at its floor
        (
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n",
            "loss-is-nan",
        ),
        # NCCL's troubleshooting guide (corpus storage-016): /dev/shm too small to grow NCCL's segment
        ("NCCL WARN Error: failed to extend /dev/shm/nccl-03v824 to 4194660 bytes\n", "nccl-shm-segment-failed"),
        # Kaggle/docker-python#19 (corpus startup-206): Go's lower-case ENOSPC text
        (
            "ApplyLayer exit status 1 stdout:  stderr: write /usr/local/src/opencv/build/modules/core/"
            "perf_precomp.hpp.gch/opencv_perf_core_RELEASE.gch: no space left on device\n",
            "disk-full",
        ),
    ],
    ids=["deepspeed-loss-scale", "nccl-shm-extend", "go-enospc"],
)
def test_widened_readings_read_their_new_words(tail, rule):
    assert_bug(tail, rule)


def test_a_watchdog_timeout_known_only_by_its_stack_is_the_watchdog_timeout():
    # jpata/particleflow#390 (corpus collective-timeout-014): only the C++ frames were kept
    tail = (
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in /mnt/home/ewulff/miniforge3/envs/mlpf/lib/python3.11/"
        "site-packages/torch/lib/libtorch_cuda.so)\n"
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x1554e9e16333 in /mnt/home/ewulff/miniforge3/"
        "envs/mlpf/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)\n"
        "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 (most "
        "recent call first):\n"
    )
    assert classify(tail).rule == "nccl-watchdog-timeout"
