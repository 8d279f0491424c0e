"""RequestLog.priority and batch_id (issue 30): the class a request ran at and the Batch it was a line of. Rows
written before keep theirs and read as standard, no batch."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0013_deployment_price"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="batch_id",
            field=models.CharField(
                blank=True,
                db_index=True,
                help_text="The Batch (batch_...) it was a line of; blank: none.",
                max_length=40,
            ),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="priority",
            field=models.CharField(
                db_index=True,
                default="standard",
                help_text="The class it ran at: interactive, standard or batch (console.access.models.Priority).",
                max_length=12,
            ),
        ),
    ]
