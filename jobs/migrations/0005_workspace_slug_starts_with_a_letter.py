"""Workspace slugs start with a letter (an all-digit reference is an id) and
names hold no control characters; existing rows are fixed here. Text a job
stored with lone surrogates (SQLite kept them; every page showing the job then
failed) gets U+FFFD in their place."""

import re
import unicodedata

from django.db import migrations, models

import jobs.inputs

SLUG = re.compile(r"[A-Za-z][-A-Za-z0-9_]*")


def _valid_text(value):
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value).replace("\x00", "")


def _name(value):
    value = _valid_text(value)
    return " ".join("".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in value).split())


def _json_text(value):
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, list):
        return [_json_text(v) for v in value]
    if isinstance(value, dict):
        return {_json_text(k): _json_text(v) for k, v in value.items()}
    return value


def fix_existing(apps, schema_editor):
    Workspace = apps.get_model("jobs", "Workspace")
    Job = apps.get_model("jobs", "Job")
    taken = set(Workspace.objects.values_list("slug", flat=True))
    for ws in Workspace.objects.all():
        fields = {}
        if not SLUG.fullmatch(ws.slug):
            base = "ws-" + re.sub(r"[^-A-Za-z0-9_]", "", ws.slug)[:90].strip("-")
            slug, n = base, 1
            while slug in taken:
                n += 1
                slug = f"{base}-{n}"
            taken.add(slug)
            fields["slug"] = slug
        name = _name(ws.name) or fields.get("slug", ws.slug)
        if name != ws.name:
            fields["name"] = name
        if fields:
            Workspace.objects.filter(pk=ws.pk).update(**fields)
    text = ("display_name", "user_command", "workdir", "error_monitoring_args", "envs", "retryable_keywords",
            "sdk_retryable_keywords")
    for job in Job.objects.only("pk", *text).iterator():
        fields = {f: _json_text(getattr(job, f)) for f in text}
        fields["display_name"] = _name(fields["display_name"]) or f"job-{job.pk}"
        changed = {f: v for f, v in fields.items() if v != getattr(job, f)}
        if changed:
            Job.objects.filter(pk=job.pk).update(**changed)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0004_workspace_retryable_keywords'),
    ]

    operations = [
        migrations.AlterField(
            model_name='workspace',
            name='name',
            field=models.CharField(max_length=100, validators=[jobs.inputs.validate_name]),
        ),
        migrations.AlterField(
            model_name='workspace',
            name='slug',
            field=models.SlugField(max_length=100, unique=True, validators=[jobs.inputs.validate_workspace_slug]),
        ),
        migrations.RunPython(fix_existing, migrations.RunPython.noop),
    ]
