"""What coding agents need of a deployment: parser overrides and "fit max_tokens to the context left"."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0002_rename_tables"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="fit_max_tokens",
            field=models.BooleanField(
                default=False,
                help_text="Lower an output limit over the context left to what it leaves, instead of a 400.",
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="reasoning_parser",
            field=models.CharField(
                blank=True, help_text="Override of the plan's reasoning parser; 'none' turns it off.", max_length=50
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="tool_call_parser",
            field=models.CharField(
                blank=True, help_text="Override of the plan's tool-call parser; 'none' turns it off.", max_length=50
            ),
        ),
    ]
