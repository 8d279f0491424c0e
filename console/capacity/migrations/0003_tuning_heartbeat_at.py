"""A tuning's heartbeat (console.capacity.tuning): one whose worker died reads failed once silent for
lost_tasks.STALE_AFTER. Existing rows get none (null), and a running one is then judged by when it was created."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("capacity", "0002_price_from_last_check"),
    ]

    operations = [
        migrations.AddField(
            model_name="tuning",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, help_text="Last sign of life of its worker.", null=True),
        ),
    ]
