#!/usr/bin/env python
"""Django's command-line utility for Hearth."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from appliance.datafiles import keep_data_dir_private

    try:
        _ = settings.INSTALLED_APPS  # read first: a setting refused (no SECRET_KEY) says why without a traceback
    except ImproperlyConfigured as exc:
        sys.exit(f"manage.py: {exc}")
    keep_data_dir_private()  # before any command writes there (the SQLite database, engine logs)
    execute_from_command_line(sys.argv)
