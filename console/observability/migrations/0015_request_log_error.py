"""RequestLog.error: why a request failed, as its client was told. Rows written before keep theirs, with no
message (the console shows their status and outcome, as before)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0014_request_log_priority"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="error",
            field=models.CharField(
                blank=True,
                help_text="Why it failed, as its client was told: the gateway's message or the engine's (gateway.errors, at most 500 characters, nothing that looks like a secret); blank: it did not fail.",
                max_length=500,
            ),
        ),
    ]
