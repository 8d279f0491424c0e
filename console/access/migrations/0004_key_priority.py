"""Priority classes (issue 30): keys get ``priority`` ("" for every existing key: its owner member's default),
members get ``default_priority`` (standard for every existing member). No other value changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0003_members_rotation_budgets"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="priority",
            field=models.CharField(
                blank=True,
                choices=[("interactive", "Interactive"), ("standard", "Standard"), ("batch", "Batch")],
                default="",
                help_text="Blank: the owner's default. Interactive: never held. Standard: held while the deployment is saturated. Batch: waits first, charged at the batch price factor.",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="member",
            name="default_priority",
            field=models.CharField(
                choices=[("interactive", "Interactive"), ("standard", "Standard"), ("batch", "Batch")],
                default="standard",
                help_text="For their keys. Interactive: never held. Standard: held while the deployment is saturated. Batch: waits first, charged at the batch price factor.",
                max_length=12,
            ),
        ),
    ]
