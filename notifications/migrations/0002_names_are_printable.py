"""Channel and rule names hold no control characters (they are shown on one
line in lists, e-mails and chat messages); existing ones are fixed here."""

import unicodedata

from django.db import migrations, models

import jobs.inputs


def _name(value):
    return " ".join("".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in value).split())


def fix_existing(apps, schema_editor):
    for model in (apps.get_model("notifications", "Channel"), apps.get_model("notifications", "EventRule")):
        for row in model.objects.only("pk", "name", "workspace_id"):
            name = _name(row.name)
            if name == row.name:
                continue
            if not name or model.objects.filter(workspace_id=row.workspace_id, name=name).exists():
                name = f"{name} ({row.pk})".strip()
            model.objects.filter(pk=row.pk).update(name=name[:100])


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='channel',
            name='name',
            field=models.CharField(max_length=100, validators=[jobs.inputs.validate_name]),
        ),
        migrations.AlterField(
            model_name='eventrule',
            name='name',
            field=models.CharField(max_length=100, validators=[jobs.inputs.validate_name]),
        ),
        migrations.RunPython(fix_existing, migrations.RunPython.noop),
    ]
