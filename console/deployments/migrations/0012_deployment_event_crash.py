"""A deployment's history keeps its engines' crashes (kind ``crash``: a serving replica's engine ended by itself,
with why and when it restarts), beside its sleeps and wakes. Only the field's choices change, which Django keeps in
Python: no statement is run and every row keeps its value, forwards and backwards.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0011_fit_max_tokens_on_by_default"),
    ]

    operations = [
        migrations.AlterField(
            model_name="deploymentevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("sleep", "Sleep"),
                    ("wake", "Wake"),
                    ("stop_idle", "stopped to save"),
                    ("wake_failed", "wake failed"),
                    ("crash", "engine crashed"),
                ],
                max_length=12,
            ),
        ),
    ]
