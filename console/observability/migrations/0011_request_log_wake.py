"""RequestLog.woke_engine and wake_seconds: whether a request was held for its deployment's wake (issue 29: the model
was asleep or stopped to save) and for how long. Rows written before keep theirs: not held (False, NULL)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0010_request_log_request_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="woke_engine",
            field=models.BooleanField(
                default=False,
                help_text="Held for its deployment's wake first: the model was asleep or stopped to save "
                "(gateway.holding).",
            ),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="wake_seconds",
            field=models.FloatField(
                help_text="How long it was held for the wake (in its TTFT and duration too); None: not held.",
                null=True,
            ),
        ),
    ]
