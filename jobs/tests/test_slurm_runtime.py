"""The files the Slurm backend copies to the nodes (vigil_runtime, slurm_step.py) import
with the standard library alone: a node has none of the console's code, so an import of
`core` or Django there loses every instance before it starts (it did: replica groups'
`core.replicas` in frameworks.py). Checked in an interpreter that sees only the runtime
directory and the standard library (-I -S: no site-packages, no current directory)."""

import subprocess
import sys

from jobs.backends.slurm import SlurmBackend

IMPORTS = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "import vigil_runtime.frameworks, vigil_runtime.noderedis, vigil_runtime.fr_files, slurm_step; "
    "print('ok')"
)


def test_the_node_runtime_imports_with_the_standard_library_alone(tmp_path):
    SlurmBackend._write_runtime(SlurmBackend.__new__(SlurmBackend), tmp_path)
    runtime = tmp_path / "runtime"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", IMPORTS, str(runtime)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
