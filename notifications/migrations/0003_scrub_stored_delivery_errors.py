"""Delivery errors and disabled reasons stored before issue 12 could hold the
destination's path, query or credentials (a webhook URL's path is often its
secret); they are scrubbed as new ones are (notifications.outbound.scrub)."""

from django.db import migrations


def scrub_stored_errors(apps, schema_editor):
    from notifications.outbound import scrub

    Channel = apps.get_model("notifications", "Channel")
    Delivery = apps.get_model("notifications", "Delivery")
    DeliveryAttempt = apps.get_model("notifications", "DeliveryAttempt")
    for channel in Channel.objects.only("pk", "url", "disabled_reason"):
        if channel.disabled_reason:
            Channel.objects.filter(pk=channel.pk).update(disabled_reason=scrub(channel.disabled_reason, channel.url))
        for model, rows in ((Delivery, Delivery.objects.filter(channel=channel)),
                            (DeliveryAttempt, DeliveryAttempt.objects.filter(delivery__channel=channel))):
            for pk, error in rows.exclude(error="").values_list("pk", "error"):
                clean = scrub(error, channel.url)
                if clean != error:
                    model.objects.filter(pk=pk).update(error=clean)


class Migration(migrations.Migration):

    dependencies = [
        ("notifications", "0002_names_are_printable"),
    ]

    operations = [
        migrations.RunPython(scrub_stored_errors, migrations.RunPython.noop),
    ]
