"""The table taken over from console gets this app's own name (console_modelsource → catalog_modelsource); rows, keys and
foreign keys referencing it are kept (PostgreSQL and SQLite rename in place)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0003_hand_over_to_domain_apps"),
        ("catalog", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelTable(
            name="modelsource",
            table=None,
        ),
    ]
