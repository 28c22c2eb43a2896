"""Start-up checks: bad configuration is reported before the first job runs."""

from django.conf import settings
from django.core.checks import Error, Warning, register
from django.utils.module_loading import import_string

from jobs.access import WORKSPACE_CREATION_CHOICES


@register()
def vigil_configuration(app_configs, **kwargs):
    problems = []
    if len(settings.SECRET_KEY) < 40:
        problems.append(
            Warning(
                "SECRET_KEY is short; sessions and job tokens are signed with it.",
                hint="Set SECRET_KEY to at least 50 random characters, or unset it to use a generated one.",
                id="vigil.W001",
            )
        )
    backends = getattr(settings, "JOB_BACKENDS", {})
    if "local" not in backends:
        problems.append(Error("JOB_BACKENDS has no 'local' entry.", id="vigil.E001"))
    for name, conf in backends.items():
        path = conf.get("BACKEND") if isinstance(conf, dict) else None
        if not path:
            problems.append(Error(f"JOB_BACKENDS[{name!r}] has no BACKEND dotted path.", id="vigil.E002"))
            continue
        try:
            import_string(path)
        except ImportError as exc:
            problems.append(Error(f"JOB_BACKENDS[{name!r}]: cannot import {path}: {exc}", id="vigil.E003"))
    roles = set(settings.VIGIL_LOCAL_SUBMIT_ROLES)
    unknown = roles - {"owner", "admin", "member", "viewer"}
    if unknown:
        problems.append(
            Error(
                f"VIGIL_LOCAL_SUBMIT_ROLES has unknown roles {sorted(unknown)}; "
                "accepted: owner, admin, member, viewer.",
                id="vigil.E004",
            )
        )
    creation = getattr(settings, "VIGIL_WORKSPACE_CREATION", "staff")
    if creation not in WORKSPACE_CREATION_CHOICES:
        problems.append(
            Error(
                f"VIGIL_WORKSPACE_CREATION is {creation!r}; accepted: {', '.join(WORKSPACE_CREATION_CHOICES)}.",
                id="vigil.E006",
            )
        )
    if not str(settings.REDIS_URL).startswith(("redis://", "rediss://", "unix://")):
        problems.append(Error(f"REDIS_URL {settings.REDIS_URL!r} is not a redis:// URL.", id="vigil.E005"))
    return problems
