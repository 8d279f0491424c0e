"""A model source may be a demo catalog entry (kind "demo"): a new choice only, no column changes, every row kept."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0003_chat_template"),
    ]

    operations = [
        migrations.AlterField(
            model_name="modelsource",
            name="kind",
            field=models.CharField(
                choices=[("local", "Local folder"), ("hf", "Hugging Face"), ("demo", "Demo catalog")], max_length=10
            ),
        ),
    ]
