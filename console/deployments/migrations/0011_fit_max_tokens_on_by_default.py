""" "Fit max_tokens to the context left" is on for a deployment made from now on (issue 32: Claude Code asks for
32,000 output tokens whatever the context, and was refused on any deployment under about 45K tokens until an
admin found the switch). Each existing deployment keeps the value it has, on or off: only the field's default
changes, which Django keeps in Python, not in the database (``sqlmigrate`` prints no statement for it), so no row
is written. Backwards the same: the default is off again, and every row keeps its value.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0010_stopped_stays_stopped"),
    ]

    operations = [
        migrations.AlterField(
            model_name="deployment",
            name="fit_max_tokens",
            field=models.BooleanField(
                default=True,
                help_text="Lower an output limit over the context left to what it leaves, instead of a 400 "
                "(on for a deployment made since migration 0011; one made before keeps its setting).",
            ),
        ),
    ]
