"""The request log table taken over from the gateway gets this app's own name (gateway_requestlog →
observability_requestlog) and its index the name Django gives it here; rows and keys are kept."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0003_requestlog_to_observability"),
        ("observability", "0001_initial"),
    ]

    operations = [
        migrations.RenameIndex(
            model_name="requestlog",
            new_name="observabili_api_key_7d6e1c_idx",
            old_name="gateway_req_api_key_327713_idx",
        ),
        migrations.AlterModelTable(
            name="requestlog",
            table=None,
        ),
    ]
