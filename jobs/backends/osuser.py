"""Which operating-system user a job's processes run as (local and Slurm backends).

A process can only switch users when it is root: then a job never runs as root
unless the deployer said so (VIGIL_LOCAL_ALLOW_ROOT=1), and runs as the
workspace's `run_as` user or else the backend's default (`nobody`). A console
that is not root cannot switch: its jobs run as its own user, and a workspace
that asks for another user is refused rather than silently run as the console.

Standard library only (the shim and the Slurm step import nothing of Django).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from dataclasses import asdict, dataclass

from .base import BackendError

DEFAULT_RUN_AS = "nobody"


@dataclass(frozen=True)
class RunAs:
    """Who a job runs as. `switch` says whether the launcher must drop privileges
    (it is root and the job's user is someone else)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    switch: bool

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["groups"] = list(self.groups)
        return d


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def resolve_run_as(
    requested: str,
    *,
    default: str = DEFAULT_RUN_AS,
    allow_root: bool = False,
    setting: str = "VIGIL_LOCAL_RUN_AS",
    allow_setting: str = "VIGIL_LOCAL_ALLOW_ROOT",
    euid: int | None = None,
) -> RunAs:
    """The user a job runs as. `requested` is the workspace's `run_as` ("" = none)."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        me = _user_name(euid)
        if requested and requested != me:
            raise BackendError(
                f"the workspace's jobs must run as OS user {requested!r}, but the console runs as {me!r}, "
                "not root, so it cannot switch users: clear the workspace's run_as or run the console's "
                "worker as root"
            )
        return RunAs(me, euid, os.getegid(), tuple(os.getgroups()), switch=False)
    if not requested and allow_root:
        return RunAs("root", 0, 0, (0,), switch=False)
    name = requested or default
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        where = "the workspace's run_as" if requested else setting
        raise BackendError(f"{where}: there is no OS user {name!r} on this machine") from None
    if pw.pw_uid == 0 and not allow_root:
        how = f": set {allow_setting}=1 to allow it" if allow_setting else ""
        raise BackendError(f"refusing to run a job as root (OS user {name!r}){how}")
    groups = tuple(sorted(set(os.getgrouplist(name, pw.pw_gid))))
    return RunAs(name, pw.pw_uid, pw.pw_gid, groups, switch=pw.pw_uid != 0)


def current_user() -> str:
    return _user_name(os.geteuid())


def blocked_ancestor(path: str, who: RunAs) -> str | None:
    """The first directory on the way to `path` that `who` may not pass through
    (mode bits only), or None. Root passes everywhere."""
    if who.uid == 0:
        return None
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        d = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(d)
        except OSError:
            return d
        if st.st_uid == who.uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid in who.groups or st.st_gid == who.gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return d
    return None


def as_user(who: RunAs) -> dict:
    """subprocess.Popen's arguments that run a child as `who` ({} without a switch)."""
    if not who.switch:
        return {}
    return {"user": who.uid, "group": who.gid, "extra_groups": list(who.groups)}


def can_enter(path: str, who: RunAs) -> bool:
    """Can `who` change into directory `path`? Asked of the kernel as that user (a /bin/sh
    run with its uid and groups: ACLs, mounts and every ancestor count), never by looking
    as root, which passes everywhere."""
    if not who.switch:
        return os.path.isdir(path)
    return _sh_as(who, 'cd -- "$1"', path)


def can_read_dir(path: str, who: RunAs) -> bool:
    """Can `who` enter and list directory `path` (a repository its jobs run from)?"""
    return _sh_as(who, 'cd -- "$1" && [ -r . ]', path)


# A program on PATH as the shell looks for it: a word with a slash is taken as it is
# (relative to the working directory), else the first PATH entry holding an executable file.
_FIND = """
cd -- "$1" 2>/dev/null || exit 0
case $2 in */*) [ -f "$2" ] && [ -x "$2" ]; exit;; esac
IFS=:
for d in $3; do
  [ -n "$d" ] || d=.
  [ -f "$d/$2" ] && [ -x "$d/$2" ] && exit 0
done
exit 1
"""


def can_find(program: str, path: str, workdir: str, who: RunAs) -> bool:
    """Would /bin/sh, run as `who` in `workdir` with PATH `path`, find `program` and be
    allowed to execute it? A workdir `who` cannot enter answers True: it is refused on
    its own (can_enter)."""
    return _sh_as(who, _FIND, workdir, program, path)


def _sh_as(who: RunAs, script: str, *args: str) -> bool:
    """Run `script` with /bin/sh as `who`: did it exit 0?"""
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", script, "sh", *args],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            **as_user(who),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def run_as_problems(who: RunAs, python: str, repo: str) -> list[str]:
    """What `who` cannot do of what the README's demo needs: run the console's Python
    (the venv's, found on the jobs' PATH) and read the repository. Empty when it can,
    or when there is no switch (the jobs run as the console's own user)."""
    if not who.switch:
        return []
    problems = []
    if not _sh_as(who, '[ -f "$1" ] && [ -x "$1" ]', python):
        problems.append(f"cannot execute {python}")
    if not can_read_dir(repo, who):
        problems.append(f"cannot read the repository {repo}")
    return problems


def run_as_advice(who: RunAs) -> str:
    """The two ways out when the jobs' OS user cannot run what they need."""
    return (
        f"local jobs run as OS user {who.name!r} (VIGIL_LOCAL_RUN_AS, or the workspace's run_as): "
        "set VIGIL_LOCAL_RUN_AS to a user who can (or give the workspace a run_as who can), "
        "or on a single-user machine set VIGIL_LOCAL_ALLOW_ROOT=1 to run jobs as root"
    )
