"""RequestLog.client_request_id: the x-request-id a client sent with its request, indexed so the request log finds
a request by it. Rows written before keep NULL (no id was kept)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0011_request_log_wake"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="client_request_id",
            field=models.CharField(
                db_index=True,
                help_text="The client's own x-request-id, when it sent a usable one (gateway.request_ids); not unique.",
                max_length=128,
                null=True,
            ),
        ),
    ]
