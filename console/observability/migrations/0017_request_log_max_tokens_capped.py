"""RequestLog.max_tokens_capped and max_tokens_capped_by: the output limit the gateway sent after a cap lowered (or
set) it, and whose cap it was. Rows written before keep None and blank (no cap applied, or not known)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0016_request_log_max_tokens_fitted"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="max_tokens_capped",
            field=models.PositiveIntegerField(
                help_text="The output limit (tokens) the gateway sent after lowering the client's, or setting one it did not ask, to a cap: the key's or the deployment's max_tokens cap, or what the key's token limits or budgets left (max_tokens_capped_by; the answer said so in x-hearth-max-tokens-capped); None: no cap applied.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="max_tokens_capped_by",
            field=models.CharField(
                blank=True,
                default="",
                help_text="Whose cap: key, deployment, limit or budget; blank: none.",
                max_length=12,
            ),
        ),
    ]
