"""Classifying a failed instance, and picking the root cause among several (SPEC 4, 9).

Pure: no Django, no clock. Precedence, first that applies:
1. a decisive backend reason (OOMKilled, Evicted, NODE_FAIL, PREEMPTED, CANCELLED,
   ImagePullBackOff, ...); where the reason has cases that its log tells apart, a specific
   log signature of the families the reason names (`Signature.refined_by`) decides instead
   (a rate limit behind ImagePullBackOff is retryable, a missing tag is not; Slurm's
   CANCELLED is a preemption, a node failure, a time limit or a person's scancel);
2. the job's (and its workspace's) retryable keywords: literal, case-insensitive
   substrings, never regular expressions; a match makes the failure retryable;
3. the catalog (`core.catalog`): specific signatures beat the generic uncaught-Python-
   exception one when they appear inside or after the traceback of that exception (one
   seen only earlier in the log is stale: start-up retry warnings, say); among several
   specific ones, the one on the latest line of the tail wins (the most recent error),
   and on the same line the earlier catalog entry wins;
   for a process killed from outside (SIGKILL, SIGTERM, SIGINT, SIGHUP) only signatures
   that can explain such a kill count (OOM killer, hardware, network, preemption), so a
   start-up warning such as "Permission denied" does not turn a preemption into a bug;
   for one that crashed by a fault signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE) only
   not-retryable signatures and hardware/driver or node faults count, so a stale network
   warning does not make a segfault retryable;
4. the exit status (issue 13's evidence-based policy): a SIGKILL with no evidence is
   retryable once per instance (`Classification.retry_limit`, applied by the policy);
   SIGTERM, SIGINT, SIGHUP and SIGABRT are retryable (an abort with no line to explain it
   is as often a library's abort at teardown as a bug; the repeated-failure guard stops
   one that repeats); SIGSEGV, SIGBUS, SIGILL and SIGFPE are crashes of the program, not
   retried; 127 and 126 are a missing / non-executable
   command; any other non-zero exit code is a crash that is not retried.
Every classification names the family of the signature that decided and the line (or
backend reason) it decided on, so records can say how sure the verdict is.
Only the last 64 KiB of the tail are read. Matching is linear in the size of the tail:
catalog patterns are compiled once at import, and keywords are searched with str.rfind.
A literal prefilter keeps a 64 KiB tail well under 5 ms however large the catalog grows:
every pattern's required literals (derived from the pattern itself, `required_literals`)
go into one Aho-Corasick automaton, the case-folded tail is scanned once, and only the
signatures one of whose literals occurs are searched with their regular expression.
"""

from __future__ import annotations

import re
import signal as _signal
from re import _constants as _sre  # type: ignore[attr-defined]  # parse-tree opcodes, stable since 3.11
from re import _parser as _sre_parse  # type: ignore[attr-defined]
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import ahocorasick

from core.catalog import BACKEND_SIGNATURES, LOG_SIGNATURES, Signature

__all__ = [
    "TAIL_LIMIT_BYTES",
    "MAX_USER_KEYWORDS",
    "MAX_KEYWORD_LENGTH",
    "ROOT_CAUSE_WINDOW_SECONDS",
    "ErrorSource",
    "FailureInput",
    "Classification",
    "classify_failure",
    "FailureObservation",
    "pick_root_cause",
    "prepare_tail",
    "required_literals",
]

TAIL_LIMIT_BYTES = 64 * 1024
MAX_USER_KEYWORDS = 100
MAX_KEYWORD_LENGTH = 256
ROOT_CAUSE_WINDOW_SECONDS = 1.0
_MESSAGE_LIMIT = 300


class ErrorSource(StrEnum):
    EXIT_CODE = "ExitCode"
    LOG = "Log"
    BACKEND = "Backend"
    USER_KEYWORD = "UserKeyword"
    HANG = "Hang"
    EXIT_HANG = "ExitHang"
    C4D = "C4D"


@dataclass(frozen=True)
class FailureInput:
    exit_code: int | None
    signal: int | None
    log_tail: bytes | str
    backend_reason: str = ""
    user_keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Classification:
    retryable: bool
    rule: str
    error_code: str
    message: str
    source: ErrorSource
    cause: str
    next_step: str
    cascade_like: bool  # a symptom that peers show when another rank died
    family: str = ""  # the failure family of the signature that decided (catalog, corpus)
    evidence: str = ""  # the log line (or backend reason) that decided; "" when only the exit status did
    retry_limit: int | None = None  # retryable this many times per (rule, role, index), then not
    # When the generic exception decided and Python printed it as the last of a chain ("During
    # handling of the above exception", "The above exception was the direct cause"): the chain's
    # first exception, its root cause, which core.kinds counts too; "" otherwise.
    root_cause: str = ""
    # When only the exit status decided (no evidence): the tail's last non-blank lines, which
    # core.kinds searches for an error it can count ("...HTTPError 429 ...") and the user reads.
    tail_lines: tuple[str, ...] = ()


def prepare_tail(log_tail: bytes | bytearray | memoryview | str) -> str:
    """The last 64 KiB of a tail as text (UTF-8, bad bytes replaced), line ends normalised.

    Carriage returns become newlines so progress-bar output splits into lines.
    """
    if isinstance(log_tail, str):
        data = log_tail.encode("utf-8", "replace")
    elif isinstance(log_tail, (bytes, bytearray, memoryview)):
        data = bytes(log_tail)
    else:
        raise TypeError(f"log_tail: expected bytes or str, got {type(log_tail).__name__}")
    text = data[-TAIL_LIMIT_BYTES:].decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _check_input(f: FailureInput) -> None:
    for name in ("exit_code", "signal"):
        value = getattr(f, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{name}: expected an integer or None, got {value!r}")
    if f.signal is not None and not 0 < f.signal < 128:
        raise ValueError(f"signal: expected a signal number from 1 to 127, got {f.signal}")
    if f.exit_code == 0 and f.signal is None:
        raise ValueError("exit_code: 0 means the instance succeeded; only failures can be classified")
    if not isinstance(f.backend_reason, str):
        raise ValueError(f"backend_reason: expected a string, got {type(f.backend_reason).__name__}")
    keywords = f.user_keywords
    if isinstance(keywords, str) or not isinstance(keywords, Sequence):
        raise ValueError("user_keywords: expected a tuple of strings")
    if len(keywords) > MAX_USER_KEYWORDS:
        raise ValueError(f"user_keywords: at most {MAX_USER_KEYWORDS} keywords, got {len(keywords)}")
    for i, kw in enumerate(keywords):
        if not isinstance(kw, str) or not kw.strip():
            raise ValueError(f"user_keywords[{i}]: expected a non-empty string, got {kw!r}")
        if len(kw) > MAX_KEYWORD_LENGTH:
            raise ValueError(f"user_keywords[{i}]: at most {MAX_KEYWORD_LENGTH} characters, got {len(kw)}")


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


def _from_signature(
    sig: Signature,
    source: ErrorSource,
    groups: dict[str, str | None],
    line: str = "",
    evidence: str = "",
    root_cause: str = "",
) -> Classification:
    message = sig.message
    if "{" in message:
        message = message.format_map({k: (v or "").strip() for k, v in groups.items()})
        message = message.rstrip(": ")
    elif line.strip():
        # The log line itself is the most useful part of a restart record's message.
        message = f"{message}: {line.strip()}"
    return Classification(
        retryable=sig.retryable,
        rule=sig.rule,
        error_code=sig.error_code,
        message=_one_line(message),
        source=source,
        cause=sig.cause,
        next_step=sig.next_step,
        cascade_like=sig.cascade_like,
        family=sig.family,
        evidence=_one_line(evidence or line),
        retry_limit=sig.retry_limit,
        root_cause=_one_line(root_cause),
    )


def _by_backend_reason(reason: str) -> Signature | None:
    reason = reason.strip()
    if not reason:
        return None
    for sig in BACKEND_SIGNATURES:
        if sig.pattern.fullmatch(reason):
            return sig
    return None


def _by_keyword(text: str, folded: str, keywords: Iterable[str]) -> Classification | None:
    # Literal search on case-folded text: str.rfind is linear (two-way search) whatever
    # the keyword holds, so "a.*b" only ever matches the four characters a . * b.
    best: tuple[int, str] | None = None
    for kw in keywords:
        at = folded.rfind(kw.casefold())
        if at >= 0 and (best is None or at > best[0]):
            best = (at, kw)
    if best is None:
        return None
    at, kw = best
    line_start = folded.rfind("\n", 0, at) + 1
    line_end = folded.find("\n", at)
    line = folded[line_start : line_end if line_end >= 0 else len(folded)]
    if len(text) == len(folded):  # show the line as written, not case-folded
        line = text[line_start : line_end if line_end >= 0 else len(text)]
    return Classification(
        retryable=True,
        rule="user-keyword",
        error_code="USER_KEYWORD",
        message=_one_line(f'The log contains the retryable keyword "{kw}"'),
        source=ErrorSource.USER_KEYWORD,
        cause=f'The log holds "{kw}", which this job lists as a retryable error.',
        next_step="The job is retried automatically. Remove the keyword from the job's retryable "
        "errors if this failure should not be retried.",
        cascade_like=False,
        evidence=_one_line(line),
    )


_TRACEBACK_HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")


def _exception_block_start(text: str, pos: int) -> int:
    """Where the traceback that ends at `pos` begins, following chained exceptions back.

    0 when no traceback header precedes it (then the whole tail counts as its context).
    """
    start = text.rfind(_TRACEBACK_HEADER, 0, pos)
    if start < 0:
        return 0
    while True:
        # "The above exception was the direct cause..." sits just above a chained header.
        if not any(marker in text[max(0, start - 200) : start] for marker in _CHAIN_MARKERS):
            break
        earlier = text.rfind(_TRACEBACK_HEADER, 0, start)
        if earlier < 0:
            break
        start = earlier
    return text.rfind("\n", 0, start) + 1


# ---- literal prefilter ------------------------------------------------------------

# A literal shorter than this says too little to be worth a prefilter entry.
_MIN_LITERAL = 3


def _best(options: list[frozenset[str]]) -> frozenset[str] | None:
    """The most selective requirement: the one whose shortest literal is longest."""
    return max(options, key=lambda o: (min(map(len, o)), -len(o)), default=None)


def _required_of(items, top: bool = False) -> list[frozenset[str]]:
    """Requirements every match of this parsed sequence meets: each a set of literals one
    of which the match contains. At the top level all of them (the sequence needs every
    part); inside a group only the most selective one, so that alternatives combine."""
    options: list[frozenset[str]] = []
    run: list[str] = []

    def close_run() -> None:
        if len(run) >= _MIN_LITERAL:
            options.append(frozenset({"".join(run).casefold()}))
        run.clear()

    for op, av in items:
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        if op in (_sre.AT, _sre.ASSERT_NOT):
            continue  # zero-width: the literals on either side still belong together
        close_run()
        inner: frozenset[str] | None = None
        if op is _sre.SUBPATTERN or op is _sre.ATOMIC_GROUP:
            inner = _best(_required_of(av[-1] if op is _sre.SUBPATTERN else av))
        elif op is _sre.BRANCH:
            branches = [_best(_required_of(b)) for b in av[1]]
            if all(b is not None for b in branches):
                inner = frozenset(lit for b in branches if b is not None for lit in b)
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT) and av[0] >= 1:
            inner = _best(_required_of(av[2]))
        if inner:
            options.append(inner)
    close_run()
    if top:
        return options
    best = _best(options)
    return [best] if best is not None else []


def required_literals(pattern: re.Pattern[str]) -> tuple[frozenset[str], ...]:
    """What any text the pattern matches holds (ignoring case): for each set, one of its
    case-folded literals. Empty when the pattern has no literal of three characters or
    more that every match needs; such a signature is always searched."""
    return tuple(_required_of(_sre_parse.parse(pattern.pattern, pattern.flags), top=True))


@dataclass(frozen=True)
class _Prefilter:
    automaton: ahocorasick.Automaton | None  # folded literal -> its index in `literals`
    literals: tuple[str, ...]
    meets: tuple[tuple[tuple[int, int], ...], ...]  # per literal: the (signature, requirement) pairs it meets
    requirements: tuple[int, ...]  # per signature: how many requirements it has
    first: tuple[tuple[str, ...], ...]  # per signature: the literals of its first requirement
    always: frozenset[int]  # signatures without a literal, searched whole
    ascii_only: bool  # every literal is ASCII, so an ASCII-only lowering of the text will do


def _build_prefilter(signatures) -> _Prefilter:
    by_literal: dict[str, list[tuple[int, int]]] = {}
    needed, first, always = [], [], set()
    for index, sig in enumerate(signatures):
        requirements = required_literals(sig.pattern)
        needed.append(len(requirements))
        first.append(tuple(sorted(requirements[0])) if requirements else ())
        if not requirements:
            always.add(index)
        for clause, needs in enumerate(requirements):
            for literal in needs:
                by_literal.setdefault(literal, []).append((index, clause))
    literals = tuple(by_literal)
    automaton = None
    if literals:
        automaton = ahocorasick.Automaton()
        for i, literal in enumerate(literals):
            automaton.add_word(literal, i)
        automaton.make_automaton()
    return _Prefilter(
        automaton,
        literals,
        tuple(tuple(by_literal[lit]) for lit in literals),
        tuple(needed),
        tuple(first),
        frozenset(always),
        all(lit.isascii() for lit in literals),
    )


_PREFILTER = _build_prefilter(LOG_SIGNATURES)

# Characters that Unicode case-insensitive matching equates with an ASCII letter (Kelvin
# sign, long s, dotted/dotless i): a text holding one is folded fully.
_FOLDS_TO_ASCII = ("\u212a", "\u017f", "\u0130", "\u0131")


def _fold(text: str) -> str:
    """A case-folded copy of the text as long as the text, for the prefilter. Full
    casefold() is slow on non-ASCII text (progress bars) and can change its length; the
    literals are ASCII, so lowering the ASCII letters alone finds every one of them."""
    if text.isascii():
        return text.casefold()
    if not _PREFILTER.ascii_only or any(ch in text for ch in _FOLDS_TO_ASCII):
        return text.casefold()
    return text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


def _candidates(folded: str) -> dict[int, dict[str, int] | None]:
    """The log signatures that can match a text whose fold is `folded`: index -> where
    the last occurrence of each literal of its first requirement starts (to find the
    lines that can hold a match), or None for a signature searched whole."""
    found: dict[int, dict[str, int] | None] = dict.fromkeys(_PREFILTER.always)
    if _PREFILTER.automaton is None:
        return found
    last_end = {i: end for end, i in _PREFILTER.automaton.iter(folded)}  # later hits overwrite
    seen = last_end.keys()
    met = {pair for i in seen for pair in _PREFILTER.meets[i]}
    counts: dict[int, int] = {}
    for index, _ in met:
        counts[index] = counts.get(index, 0) + 1
    starts = {_PREFILTER.literals[i]: end - len(_PREFILTER.literals[i]) + 1 for i, end in last_end.items()}
    found.update(
        (i, {lit: starts[lit] for lit in _PREFILTER.first[i] if lit in starts})
        for i, n in counts.items()
        if n == _PREFILTER.requirements[i]
    )
    return found


def _last_match(
    pattern: re.Pattern[str], text: str, folded: str, literals: dict[str, int] | None
) -> re.Match[str] | None:
    """The pattern's last match in the text. No catalog pattern matches across a line end
    (a catalog test checks it), so with literals one of which every match holds, only
    the lines that hold one are searched, from the last line back (found with rfind)."""
    last = None
    if literals is None or len(folded) != len(text):
        for last in pattern.finditer(text):
            pass
        return last
    # The last occurrence of each literal not yet searched (the automaton's last hit to
    # begin with); each is searched for again only once the lines above it are reached,
    # so every literal's scan covers the text once.
    at = dict(literals)
    while True:
        start = max(at.values())
        if start < 0:
            return None
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        for last in pattern.finditer(text, line_start, line_end if line_end >= 0 else len(text)):
            pass
        if last is not None:
            return last
        for lit, pos in at.items():
            if pos >= line_start:  # found again, it must end before this line
                at[lit] = folded.rfind(lit, 0, line_start)


class _Ending(StrEnum):
    """How the process ended, which decides what evidence in its log can explain it."""

    EXIT = "exit"  # an exit code, or SIGABRT (the program aborted itself)
    KILLED = "kill"  # SIGKILL, SIGTERM, SIGINT, SIGHUP: stopped from outside
    CRASHED = "crash"  # SIGSEGV, SIGBUS, SIGILL, SIGFPE: a fault inside the process


# A launcher's own exception for a child process that failed, raised after the child's output:
# subprocess.CalledProcessError from `accelerate launch` (simple_launcher, multi_gpu_launcher), the
# old torch.distributed.launch and DeepSpeed's runner; torchrun's ChildFailedError (which the
# generic signature already skips). It says that the child failed, not why: the child's last
# error above it does.
_WRAPPER = re.compile(r"\b(?:CalledProcessError|ChildFailedError)\b")


def _line_of(text: str, line_start: int) -> str:
    line_end = text.find("\n", line_start)
    return text[line_start : line_end if line_end >= 0 else len(text)]


def _last_unwrapped(
    text: str, wrapper: tuple[tuple[int, int], Signature, re.Match[str], int]
) -> tuple[tuple[int, int], Signature, re.Match[str], int] | None:
    """The last match of the wrapper's (generic) signature above the wrapper's line that is not a
    wrapper's own: the child's exception. None when the child printed none."""
    (_, order), sig, _, wrapper_start = wrapper
    child = None
    for match in sig.pattern.finditer(text, 0, wrapper_start):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if not _WRAPPER.search(_line_of(text, line_start)):
            child = ((line_start, order), sig, match, line_start)
    return child


def _by_catalog(
    text: str, folded: str, ending: _Ending = _Ending.EXIT, families: tuple[str, ...] | None = None
) -> Classification | None:
    """The latest specific signature, or the generic exception when it is more relevant.

    A specific signature inside or after the final traceback beats the generic exception
    (a RuntimeError wrapping "Connection reset by peer" is the communication error). One
    seen only before that traceback is stale (e.g. rendezvous "Connection refused" retry
    warnings at start-up) and the exception that ended the program wins. For a process
    killed from outside, only signatures that can explain such a kill count; for one that
    crashed by a fault signal, only not-retryable ones and hardware/node faults. With
    `families`, only the specific signatures of those families count (refining a backend
    reason). A launcher's exception for a failed child (CalledProcessError, ChildFailedError) is
    not the program's own: the child's exception above it, if it printed one, stands in for it.
    """
    found: dict[bool, tuple[tuple[int, int], Signature, re.Match[str], int]] = {}
    for order, literals in sorted(_candidates(folded).items()):
        sig = LOG_SIGNATURES[order]
        if ending is _Ending.KILLED and not sig.can_explain_kill:
            continue
        if ending is _Ending.CRASHED and not sig.can_explain_crash:
            continue
        if families is not None and (sig.family not in families or not sig.specific):
            continue
        last = _last_match(sig.pattern, text, folded, literals)
        if last is None:
            continue
        line_start = text.rfind("\n", 0, last.start()) + 1
        key = (line_start, -order)
        if sig.specific not in found or key > found[sig.specific][0]:
            found[sig.specific] = (key, sig, last, line_start)
    specific, generic = found.get(True), found.get(False)
    if generic is not None and _WRAPPER.search(_line_of(text, generic[3])):
        # A launcher's report of a child that failed: the child's own exception above it is the
        # one that ended the program, and the one a specific signature must not precede. A child
        # that printed no exception leaves the launcher's (its output is no traceback to read).
        generic = _last_unwrapped(text, generic) or generic
    if specific is not None and generic is not None:
        if specific[3] < _exception_block_start(text, generic[3]):
            specific = None
    chosen = specific or generic
    if chosen is None:
        return None
    _, sig, match, line_start = chosen
    line_end = text.find("\n", match.end())
    line = text[line_start : line_end if line_end >= 0 else len(text)]
    root = _chain_root(text, sig, line_start) if not sig.specific else ""
    return _from_signature(sig, ErrorSource.LOG, match.groupdict(), line, root_cause=root)


def _chain_root(text: str, sig: Signature, line_start: int) -> str:
    """The first exception of the chain whose last exception is on the line at `line_start`,
    when Python printed a chain: the root cause, printed first. "" when there is no chain."""
    start = _exception_block_start(text, line_start)
    if not any(marker in text[start:line_start] for marker in _CHAIN_MARKERS):
        return ""
    first = sig.pattern.search(text, start, line_start)
    return "" if first is None else _line_of(text, text.rfind("\n", 0, first.start()) + 1)


def _signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# Signals that come from outside the program (scheduler, node agent, person, supervisor),
# unlike SIGABRT or SIGSEGV, which the program's own failure raises.
_EXTERNAL_SIGNALS = frozenset({_signal.SIGKILL, _signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP})
# Faults inside the process: a bug, a version mismatch or a configuration (too small
# /dev/shm for SIGBUS) unless a hardware/driver line or the scheduler explains them.
_FAULT_SIGNALS = frozenset({_signal.SIGSEGV, _signal.SIGBUS, _signal.SIGILL, _signal.SIGFPE})


def _ending(signum: int | None) -> _Ending:
    if signum in _EXTERNAL_SIGNALS:
        return _Ending.KILLED
    if signum in _FAULT_SIGNALS:
        return _Ending.CRASHED
    return _Ending.EXIT


def _effective_signal(exit_code: int | None, signum: int | None) -> int | None:
    if signum is None and exit_code is not None:
        if exit_code < 0:  # subprocess convention: -N is killed by signal N
            return -exit_code
        if 128 < exit_code <= 128 + 64:  # shell convention: 128+N is killed by signal N
            return exit_code - 128
    return signum


# The shell's exit codes for a command that never ran (POSIX): (rule, message, cause, next step).
_COMMAND_EXITS: dict[int, tuple[str, str, str, str]] = {
    127: (
        "command-not-found",
        "Exit code 127: the command was not found",
        "The command to run does not exist on the instance (exit code 127).",
        "Check the spelling of the command and that the program is installed in the "
        "image or on PATH, then submit the job again.",
    ),
    126: (
        "command-not-executable",
        "Exit code 126: the command could not be executed",
        "The command exists but could not be run: it is not executable, not a program, or "
        "the job's OS user may not run it (a directory above it closed to that user).",
        # Issue 28: under a root console the usual cause is the OS user the job runs as
        # (Python under a 0700 /root run as nobody), where the file's mode bits are fine.
        "If the console runs as root, the job runs as VIGIL_LOCAL_RUN_AS (default nobody) or its "
        "workspace's run_as, who must be able to run the program and pass through every directory "
        "above it: set VIGIL_LOCAL_RUN_AS to a user who can, or VIGIL_LOCAL_ALLOW_ROOT=1 on a "
        "single-user machine. Otherwise give the script the execute "
        "bit or run it through its interpreter (python, bash), then submit the job again.",
    ),
}


def _by_exit_status(exit_code: int | None, signum: int | None) -> Classification:
    signum = _effective_signal(exit_code, signum)
    # SIGABRT is left out on purpose: with no line to explain it, it is as often a
    # library's abort at teardown (gloo, NCCL's watchdog) as a bug; the repeated-failure
    # guard stops the deterministic ones on their second occurrence.
    if signum in _FAULT_SIGNALS:
        name = _signal_name(signum)
        shown = f"exit code {exit_code}, " if exit_code not in (None, -signum) else ""
        return Classification(
            retryable=False,
            rule="crashed-by-signal",
            error_code=name,
            message=f"Crashed with {name} ({shown}signal {signum})",
            source=ErrorSource.EXIT_CODE,
            cause=f"The program crashed with {name} and its log names no hardware, driver or "
            "scheduler cause: most often a bug or a version mismatch of native libraries"
            + (", or too little shared memory (/dev/shm)" if signum == _signal.SIGBUS else "")
            + ", which a restart repeats.",
            next_step="Read the instance log for the last lines before the crash; check that torch, "
            "CUDA and compiled extensions match. If it only ever happens on one node, "
            "add its error line as a retryable keyword.",
            cascade_like=False,
            family="signals",
        )
    if signum is not None:
        name = _signal_name(signum)
        shown = f"exit code {exit_code}, " if exit_code not in (None, -signum) else ""
        # Decision (issue 13): a SIGKILL with nothing in the log to explain it is usually
        # the node or a person, so it is retried once; a second one on the same instance
        # is not (policy: Classification.retry_limit).
        once = signum == _signal.SIGKILL
        return Classification(
            retryable=True,
            rule="killed-by-signal",
            error_code=name.upper().replace(" ", "_"),
            message=f"Killed by {name} ({shown}signal {signum})",
            source=ErrorSource.EXIT_CODE,
            cause=f"The instance was killed by {name} with no error in its log: usually the node, "
            "the scheduler or a person stopped it, not the program.",
            next_step=(
                "The job is retried once. If it is killed again, check the node's memory "
                "(a kill with no log line is often the out-of-memory killer) and its health."
                if once
                else "The job is retried automatically. If it repeats on the same node, check "
                "that node's health and memory."
            ),
            cascade_like=signum in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT),
            family="signals",
            retry_limit=1 if once else None,
        )
    if exit_code is None:
        return Classification(
            retryable=True,
            rule="exit-status-unknown",
            error_code="EXIT_UNKNOWN",
            message="The instance ended without an exit status",
            source=ErrorSource.EXIT_CODE,
            cause="The instance disappeared without an exit status; its process or node was lost.",
            next_step="The job is retried automatically. If it repeats on the same node, check that node.",
            cascade_like=False,
        )
    if exit_code in _COMMAND_EXITS:
        rule, message, cause, next_step = _COMMAND_EXITS[exit_code]
        return Classification(
            retryable=False,
            rule=rule,
            error_code=f"EXIT_CODE_{exit_code}",
            message=message,
            source=ErrorSource.EXIT_CODE,
            cause=cause,
            next_step=next_step,
            cascade_like=False,
        )
    return Classification(
        retryable=False,
        rule="crashed-with-exit-code",
        error_code=f"EXIT_CODE_{exit_code}",
        message=f"Crashed with exit code {exit_code}",
        source=ErrorSource.EXIT_CODE,
        cause=f"The program crashed with exit code {exit_code} and its log names no known error.",
        next_step="Read the instance log: the last lines before the exit show what went wrong.",
        cascade_like=False,
    )


def classify_failure(f: FailureInput) -> Classification:
    """Classify one failed instance. Raises ValueError for a success or malformed input."""
    _check_input(f)
    text = prepare_tail(f.log_tail)
    folded = _fold(text)
    backend = _by_backend_reason(f.backend_reason)
    if backend is not None:
        # The scheduler's reason decides first; where its log says which case of that
        # reason this is (a rate limit behind ImagePullBackOff, a time limit behind
        # CANCELLED), that line decides instead.
        refined = _by_catalog(text, folded, families=backend.refined_by) if backend.refined_by else None
        return refined or _from_signature(backend, ErrorSource.BACKEND, {}, evidence=f.backend_reason.strip())
    return (
        (_by_keyword(text, text.casefold(), f.user_keywords) if f.user_keywords else None)
        or _by_catalog(text, folded, _ending(_effective_signal(f.exit_code, f.signal)))
        or replace(_by_exit_status(f.exit_code, f.signal), tail_lines=_last_lines(text))
    )


TAIL_LINES = 5


def _last_lines(text: str) -> tuple[str, ...]:
    lines = [_one_line(line) for line in text[-8192:].splitlines() if line.strip()]
    return tuple(lines[-TAIL_LINES:])


# ---- root cause among several failed instances (SPEC 9) -------------------------------


@dataclass(frozen=True)
class FailureObservation:
    instance: str  # "worker-1"
    role: str
    index: int
    exited_at: float | None  # epoch seconds; None when the backend does not know
    classification: Classification


def pick_root_cause(
    observations: Iterable[FailureObservation],
) -> tuple[FailureObservation, tuple[FailureObservation, ...]]:
    """The failure that most likely caused the others, and the others (cascades).

    The earliest exit wins. Exits within ROOT_CAUSE_WINDOW_SECONDS of the earliest are
    treated as simultaneous (clocks and polling blur the order); among those a failure
    that is not cascade-like (a real crash, not a peer's "connection reset") wins, and
    failing that, a communication error beats a collective timeout (which only waited).
    Unknown exit times sort last. Cascades are returned in exit order.
    """
    obs = list(observations)
    if not obs:
        raise ValueError("observations: at least one failed instance is needed")

    def when(o: FailureObservation) -> float:
        return float("inf") if o.exited_at is None else o.exited_at

    ordered = sorted(obs, key=lambda o: (when(o), o.role, o.index, o.instance))
    first = when(ordered[0])
    window = [o for o in ordered if when(o) <= first + ROOT_CAUSE_WINDOW_SECONDS]
    root = (
        next((o for o in window if not o.classification.cascade_like), None)
        # A collective that timed out only waited for someone: a peer's communication
        # error within the window says more about why.
        or next((o for o in window if o.classification.family != "collective-timeout"), None)
        or ordered[0]
    )
    cascades = tuple(o for o in ordered if o is not root)
    return root, cascades
