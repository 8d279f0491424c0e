"""RequestLog.request_id: the gateway's id of each request, unique, so a row written twice (a spool entry written
again after a crash, a request recorded by the process that noticed its relay's death) is one row. Rows written
before keep NULL, which never clashes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0009_one_slo_per_deployment"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="request_id",
            field=models.CharField(
                help_text="The gateway's id of the request: whoever writes its row, and however often, it is written once.",
                max_length=32,
                null=True,
                unique=True,
            ),
        ),
    ]
