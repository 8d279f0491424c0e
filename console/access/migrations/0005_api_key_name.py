"""An API key's name in Django's words is "API key" (its 404 read "No api key with the id in ..."). Options only:
no table or row changes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0004_key_priority"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="apikey",
            options={"verbose_name": "API key"},
        ),
    ]
