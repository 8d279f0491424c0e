"""The chat template a model source keeps, for the engine's tool-call and reasoning parsers."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0002_rename_table"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelsource",
            name="chat_template",
            field=models.TextField(
                blank=True, help_text="The chat template's text, for the engine's tool-call and reasoning parsers."
            ),
        ),
    ]
