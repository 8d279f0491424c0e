"""Budget alerts' subjects name a key by its id and the lower level as the rule's threshold (``key 17 today at the
rule's threshold``), no longer by its prefix, name and percent (``key hk-3UTMmGyw (g) today at 80 %``), which a
rotation or a tuned threshold changed: each then resolved and fired again (console.alerts.conditions.budget).

Every budget alert of before is renamed, open or resolved, so an alert firing through the upgrade stays open (no
false RESOLVED, no second FIRING) and a member still sees their own alerts' history (console.alerts.visible). A key is
found by its prefix or the one before its last rotation; a subject whose key is not found, or whose new name an open
alert already has (one open alert per subject), is left as it was: an open one resolves once. Backwards, the
subjects are named by the key's prefix and name and the rule's threshold of the moment."""

import re
from collections.abc import Callable
from typing import Any

from django.db import migrations

OLD = re.compile(r"(?P<who>key (?P<prefix>\S+) \(.*\)|member .+) (?P<period>today|this month) at (?P<level>[\d.]+) %")
NEW = re.compile(
    r"(?P<who>key (?P<pk>\d+)|member .+) (?P<period>today|this month) at (?P<level>the rule's threshold|100 %)"
)
THRESHOLD, SPENT = "the rule's threshold", "100 %"


def _rename(apps: Any, renamed: Callable[[Any], str | None]) -> None:
    """Give each budget alert the subject ``renamed(alert)`` returns (None: keep its own), one open alert per subject."""
    alerts = apps.get_model("alerts", "Alert").objects.filter(rule__kind="budget").select_related("rule")
    taken = set(alerts.filter(resolved_at=None).values_list("rule_id", "subject"))
    for alert in alerts.order_by("pk"):
        subject = renamed(alert)
        if subject is None or subject == alert.subject:
            continue
        if alert.resolved_at is None:
            if (alert.rule_id, subject) in taken:
                continue
            taken.discard((alert.rule_id, alert.subject))
            taken.add((alert.rule_id, subject))
        alert.subject = subject
        alert.save(update_fields=["subject"])


def by_id(apps: Any, schema_editor: Any) -> None:
    keys = apps.get_model("access", "ApiKey").objects.values_list("pk", "prefix", "previous_prefix")
    ids = {prefix: pk for pk, _, prefix in keys if prefix} | {prefix: pk for pk, prefix, _ in keys}

    def renamed(alert: Any) -> str | None:
        if not (m := OLD.fullmatch(alert.subject)):
            return None
        who = m["who"]
        if m["prefix"]:
            if m["prefix"] not in ids:
                return None
            who = f"key {ids[m['prefix']]}"
        return f"{who} {m['period']} at {SPENT if float(m['level']) >= 100 else THRESHOLD}"

    _rename(apps, renamed)


def by_prefix(apps: Any, schema_editor: Any) -> None:
    keys = {
        pk: f"key {prefix} ({name})"
        for pk, prefix, name in apps.get_model("access", "ApiKey").objects.values_list("pk", "prefix", "name")
    }

    def renamed(alert: Any) -> str | None:
        if not (m := NEW.fullmatch(alert.subject)) or (m["pk"] and int(m["pk"]) not in keys):
            return None
        who = keys[int(m["pk"])] if m["pk"] else m["who"]
        return f"{who} {m['period']} at {100 if m['level'] == SPENT else alert.rule.threshold:g} %"

    _rename(apps, renamed)


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0001_initial"),
        ("access", "0005_api_key_name"),
    ]

    operations = [migrations.RunPython(by_id, by_prefix)]
