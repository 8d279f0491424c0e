"""RequestLog.max_tokens_fitted: the output limit the gateway sent after lowering the client's to fit the context.
Rows written before keep None (sent as asked, or not known)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0015_request_log_error"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="max_tokens_fitted",
            field=models.PositiveIntegerField(
                help_text="The output limit (tokens) the gateway sent after lowering the client's to fit the context left (gateway.context_fit; the answer said so in x-hearth-max-tokens-fitted); None: sent as asked.",
                null=True,
            ),
        ),
    ]
