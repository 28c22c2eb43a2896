"""Warm restarts (issue 19): may a command be run in a parked interpreter, and may
this parked interpreter run the next attempt? Pure: no processes, no file system.

A parked interpreter is a Python process that already imported the heavy modules
and waits; on a restart it is given the attempt's environment and runs the user's
entry point in-process. That is only indistinguishable from a cold start when the
cold start would have been exactly "this interpreter, no options, one entry point":

  * ``python script.py args...`` (also ``python3``, ``python3.11``, a path to one,
    an optional leading ``exec``, an optional ``-u``: PYTHONUNBUFFERED=1 is always
    set for a rank, so ``-u`` changes nothing) -> a script entry;
  * ``python -m package.module args...`` -> a module entry;
  * anything else starts cold: other interpreter options change how the interpreter
    was started (``-O``, ``-X``, ``-I``, ``-c``), and shell syntax (pipes, ``&&``,
    redirections, variables, globs, ``VAR=x`` prefixes, several lines) means the
    shell, not Python, is the entry point. The shell check is deliberately
    conservative: a character the shell might treat specially sends the command
    cold, even where quoting would make it harmless.

``startup_env_difference`` says whether the attempt's environment differs from the
parked one in a variable read while the interpreter starts or imports (PYTHONPATH,
the locale, the dynamic loader, OpenMP/MKL threading, PATH which picks the
interpreter): such a difference cannot be applied after the fact, so that attempt
starts cold. Variables read later (RANK, MASTER_PORT, the token) are simply set.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from enum import StrEnum

_INTERPRETER_RE = re.compile(r"python(?:[23](?:\.[0-9]{1,2})?)?")
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Characters /bin/sh may give a meaning to (operators, expansions, globs, comments,
# escapes, line breaks): any of them anywhere and the command starts cold.
_SHELL_CHARS = set(";&|<>()$`\\*?[]#~\n\r{}!")
# Environment variables read when the interpreter starts or a heavy module is
# imported; a name equal to or starting with one of these.
STARTUP_ENV_PREFIXES = ("PYTHON", "LANG", "LC_", "LD_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "PATH", "TZ")


class EntryKind(StrEnum):
    SCRIPT = "script"
    MODULE = "module"


@dataclass(frozen=True)
class WarmEntry:
    """What a parked interpreter runs: `target` is the script as written or the module name."""

    interpreter: str  # the interpreter word as written ("python", "/opt/py/bin/python3")
    kind: EntryKind
    target: str
    args: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        """sys.argv as the cold start would set it before the entry runs (for a module,
        runpy replaces argv[0] with the module's file, as ``python -m`` does)."""
        return [self.target if self.kind is EntryKind.SCRIPT else "-m", *self.args]


@dataclass(frozen=True)
class WarmDecision:
    entry: WarmEntry | None
    reason: str  # why it starts cold ("" when warm is possible)

    @property
    def warm(self) -> bool:
        return self.entry is not None


def _cold(reason: str) -> WarmDecision:
    return WarmDecision(None, reason)


def warm_entry(command: str) -> WarmDecision:
    """Whether `command` (run by the backend as ``/bin/sh -c command``) can start warm."""
    if not isinstance(command, str) or not command.strip():
        return _cold("the command is empty")
    special = sorted(_SHELL_CHARS & set(command.strip()))
    if special:
        shown = " ".join(repr(c) for c in special)
        return _cold(f"the command uses shell syntax ({shown}); only python script.py or python -m module start warm")
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return _cold(f"the command cannot be split into words ({exc})")
    if words and words[0] == "exec":
        words = words[1:]
    if not words:
        return _cold("the command is empty")
    interpreter = words[0]
    if "=" in interpreter:
        return _cold("the command sets variables before the program; put them in the job's environment")
    if not _INTERPRETER_RE.fullmatch(os.path.basename(interpreter)):
        return _cold(f"{os.path.basename(interpreter)!r} is not a Python interpreter")
    rest = words[1:]
    while rest and rest[0] == "-u":
        rest = rest[1:]
    if not rest:
        return _cold("the command starts an interactive interpreter")
    first = rest[0]
    if first == "-m" or (first.startswith("-m") and len(first) > 2):
        module = first[2:] if len(first) > 2 else (rest[1] if len(rest) > 1 else "")
        args = rest[1:] if len(first) > 2 else rest[2:]
        if not _MODULE_RE.fullmatch(module):
            return _cold(f"-m {module!r} is not a module name")
        return WarmDecision(WarmEntry(interpreter, EntryKind.MODULE, module, tuple(args)), "")
    if first.startswith("-"):
        return _cold(f"the interpreter option {first!r} changes how Python starts")
    return WarmDecision(WarmEntry(interpreter, EntryKind.SCRIPT, first, tuple(rest[1:])), "")


def _startup_relevant(name: str) -> bool:
    return name.startswith(STARTUP_ENV_PREFIXES)


def startup_env_difference(parked: dict[str, str], attempt: dict[str, str]) -> str:
    """The first start-up variable (sorted by name) that differs, as a reason; "" if none."""
    names = sorted({n for n in (*parked, *attempt) if _startup_relevant(n)})
    for name in names:
        if parked.get(name) != attempt.get(name):
            return f"{name} differs from the parked interpreter's; it is read when Python starts"
    return ""
