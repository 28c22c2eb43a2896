"""Site-level rights, beside the workspace roles (jobs.models.Role):

- running code on a backend is a Django permission per backend,
  `jobs.run_on_<backend>` (run_on_local, run_on_slurm, ...), granted by staff to
  users or groups in the admin or with `manage.py backendaccess`; a workspace role
  that may submit is needed as well, and both must hold;
- creating a workspace is for staff unless VIGIL_WORKSPACE_CREATION=anyone.

The permissions belong to no migration: they are created after every migrate
(and test-database flush) for the backend kinds Vigil ships and every backend
configured in JOB_BACKENDS, so adding a backend needs no schema change."""

from __future__ import annotations

import re

from django.conf import settings
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType

from .models import ADMIN_ROLES, WRITE_ROLES, Job
from .submission import MASKED_VALUE

APP = "jobs"
# Backend kinds Vigil ships; configured names beyond these get a permission too.
KNOWN_BACKENDS = ("local", "slurm")
WORKSPACE_CREATION_CHOICES = ("staff", "anyone")


def codename(backend: str) -> str:
    return f"run_on_{backend}"


def permission_name(backend: str) -> str:
    """The dotted name has_perm and messages use, e.g. jobs.run_on_local."""
    return f"{APP}.{codename(backend)}"


def backend_names() -> list[str]:
    """Every backend a permission exists for: the shipped kinds, then the configured ones."""
    names = list(KNOWN_BACKENDS)
    names += [name for name in getattr(settings, "JOB_BACKENDS", {}) if name not in names]
    return names


def backend_permission(backend: str):
    """The Permission row of one backend, created when missing."""
    ct = ContentType.objects.get_for_model(Job)
    perm, _ = Permission.objects.get_or_create(
        content_type=ct,
        codename=codename(backend),
        defaults={"name": f"Can run jobs on the {backend} backend"},
    )
    return perm


def ensure_backend_permissions(**kwargs) -> None:
    """post_migrate: one permission per backend name (shipped and configured)."""
    for name in backend_names():
        backend_permission(name)


def may_run_on(user, backend: str) -> bool:
    return bool(user and user.is_authenticated and user.has_perm(permission_name(backend)))


def runnable_backends(user) -> list[str]:
    """The configured backends this user may run jobs on, in settings order."""
    return [name for name in settings.JOB_BACKENDS if may_run_on(user, name)]


def missing_backend_permission(backend: str) -> str:
    return (
        f"running jobs on the {backend} backend needs the site permission {permission_name(backend)}; "
        f"ask staff to grant it (admin, or `manage.py backendaccess grant {backend} --user <you>`)."
    )


def may_create_workspace(user) -> bool:
    if not (user and user.is_authenticated):
        return False
    if getattr(settings, "VIGIL_WORKSPACE_CREATION", "staff") == "anyone":
        return True
    return bool(user.is_staff or user.is_superuser)


WORKSPACE_CREATION_REFUSED = (
    "creating workspaces is for staff on this console (VIGIL_WORKSPACE_CREATION=staff); "
    "ask staff to create one and add you, or set VIGIL_WORKSPACE_CREATION=anyone to let every account create one."
)


# --- secrets in a job's environment -------------------------------------------------

# A variable whose name contains one of these (any case) holds a secret by its name.
SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|CREDENTIAL", re.IGNORECASE)
MASK = MASKED_VALUE


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(str(name)))


def masked_envs(envs: dict) -> dict:
    """The environment with the value of every secret-looking name replaced by MASK."""
    if not isinstance(envs, dict):
        return {}
    return {name: (MASK if is_secret_name(name) else value) for name, value in envs.items()}


def sees_secrets(role: str | None, user_id: int | None, job) -> bool:
    """Owners and admins of the job's workspace see its environment in full, and so
    does the person who submitted it; everyone else (viewers, other members) sees
    secret-looking values masked."""
    return role in ADMIN_ROLES or (user_id is not None and job.created_by_id == user_id)


# --- what a person may do to a job (docs/security.md, "Who may act on a job") ---------
#
# One table for the API, the pages and the templates: every mutating action on an
# existing job names its rule here, and nothing else decides. Seeing a job at all is
# membership of its workspace (jobs.actions.job_for; another workspace's job is 404,
# for staff too: site staff have the admin site, not workspace powers).

STOP = "stop"
RECONFIGURE = "runtime"  # the runtime settings: the hang interval (API .../runtime/)
RESET_TOKEN = "reset_token"
SNAPSHOT = "snapshot"  # a stack snapshot now (API .../diagnoses/stacks/, the page's "Dump stacks now")
RETRYABLE_KEYWORD = "retryable_keyword"  # a log line made retryable for the job or the whole workspace
CLONE = "clone"  # the form filled from the job: a new submission, the job itself is untouched

# Who: OPERATORS = the job's submitter while they hold a submitting role, and the
# workspace's owners and admins. A stop, a new hang interval or a new token takes the
# job out of its submitter's hands (a reset token is a working SDK credential of it),
# so another member may not. A submitter demoted to viewer (or removed) loses it too:
# the role is what the workspace lets a person do now.
OPERATORS = "operators"
WRITERS = "writers"  # every role that may submit: owner, admin, member
ADMINS = "admins"  # owner, admin

JOB_ACTIONS: dict[str, tuple[str, str]] = {
    STOP: (OPERATORS, "stopping a job"),
    RECONFIGURE: (OPERATORS, "changing a job's hang interval"),
    RESET_TOKEN: (OPERATORS, "resetting a job's SDK token"),
    # A snapshot reads the processes' stacks (py-spy) and records what it saw; the
    # job's state, settings and token stay as they were, so every member may take one
    # of a hung job (issue 14), viewers may not.
    SNAPSHOT: (WRITERS, "taking a stack snapshot"),
    # It changes what every later failure of the job (or the workspace) is decided as.
    RETRYABLE_KEYWORD: (ADMINS, "adding a retryable keyword"),
    CLONE: (WRITERS, "cloning a job"),
}

_WHO = {
    OPERATORS: "the person who submitted it and the workspace's owners and admins",
    WRITERS: "owners, admins and members",
    ADMINS: "owners and admins",
}


def job_action_refusal(role: str | None, user_id: int | None, job, action: str) -> str | None:
    """None when a person with `role` in the job's workspace (None: not a member) may
    do `action` to `job`; else the sentence saying who may. Pure over its arguments."""
    rule, what = JOB_ACTIONS[action]
    writer = role in WRITE_ROLES
    allowed = {
        OPERATORS: role in ADMIN_ROLES or (writer and user_id is not None and job.created_by_id == user_id),
        WRITERS: writer,
        ADMINS: role in ADMIN_ROLES,
    }[rule]
    if allowed:
        return None
    return f"your role in {job.workspace.name} is {role or 'none'}; {what} is for {_WHO[rule]}."


def may_act_on(role: str | None, user_id: int | None, job, action: str) -> bool:
    return job_action_refusal(role, user_id, job, action) is None


def job_rights(role: str | None, user_id: int | None, job) -> dict[str, bool]:
    """Every action of JOB_ACTIONS -> whether this person may: the templates show a
    button only where it is True (`rights.stop`, `rights.reset_token`, ...)."""
    return {action: may_act_on(role, user_id, job, action) for action in JOB_ACTIONS}
