"""The table taken over from console gets this app's own name (console_deployment → deployments_deployment, console_replica → deployments_replica); rows, keys and
foreign keys referencing it are kept (PostgreSQL and SQLite rename in place)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0003_hand_over_to_domain_apps"),
        ("deployments", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelTable(
            name="deployment",
            table=None,
        ),
        migrations.AlterModelTable(
            name="replica",
            table=None,
        ),
    ]
