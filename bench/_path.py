"""What every bench imports first: the repository root on sys.path, and the venv's bin.

`python bench/x.py` puts only bench/ on sys.path, so without this a bench that imports the
project (core, jobs, monitoring, testsupport) dies with ModuleNotFoundError in a fresh
clone, or quietly imports some other checkout's copy. One place, so no bench has its own
variant to rot: each starts with `import _path` (bench/ is on sys.path as the script's
directory, and tests/test_benches.py runs each one that way).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The bin directory of the interpreter running the bench (.venv/bin in the docstrings'
# commands): the daphne, celery and torchrun that belong to it, also in a worktree or a
# clone whose .venv lives elsewhere.
BIN = Path(sys.executable).parent

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
