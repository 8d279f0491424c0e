#!/usr/bin/env python
"""Django's command-line utility for Hearth."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    from django.core.management import execute_from_command_line

    from appliance.datafiles import keep_data_dir_private

    keep_data_dir_private()  # before any command writes there (the SQLite database, engine logs)
    execute_from_command_line(sys.argv)
