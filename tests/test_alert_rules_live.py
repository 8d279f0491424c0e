"""Prometheus's alert rules for Hearth (scripts/monitoring/alerts.yml) pass promtool and name only what /metrics
exports: each series, each label a matcher or a ``by`` reads, each exact label value (a histogram bucket's bound,
a state) is in a real scrape of a served simulator deployment after a request."""

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT
from tests.simworld import Served, hearth_metrics

RULES = ROOT / "scripts" / "monitoring" / "alerts.yml"
PROMTOOL = settings.HEARTH_CACHE_DIR / "prometheus/usr/bin/promtool"  # scripts/test-services.sh unpacks it
SELECTOR = re.compile(r"\b(hearth_[a-z0-9_]+)(?:\{([^}]*)\})?")
MATCHER = re.compile(r'([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def rules(path: Path = RULES) -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def test_every_rule_has_a_name_an_expression_a_severity_and_a_summary() -> None:
    found = rules()
    assert len(found) >= 8 and len({r["alert"] for r in found}) == len(found)
    for rule in found:
        assert isinstance(rule["expr"], str) and SELECTOR.search(rule["expr"]), rule
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule  # type: ignore[index]
        assert rule["annotations"]["summary"], rule  # type: ignore[index]
    compose_rules = yaml.safe_load((ROOT / "scripts" / "monitoring" / "prometheus.yml").read_text())["rule_files"]
    assert compose_rules == ["/etc/prometheus/alerts.yml"]


@pytest.mark.process
def test_promtool_finds_the_rules_valid() -> None:
    checked = subprocess.run([PROMTOOL, "check", "rules", RULES], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and f"SUCCESS: {len(rules())} rules found" in checked.stdout, checked.stderr


def labels_seen(text: str) -> dict[str, dict[str, set[str]]]:
    """series name → label → the values seen, in a scrape."""
    seen: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for label, value in sample.labels.items():
                seen.setdefault(sample.name, {}).setdefault(label, set()).add(value)
            seen.setdefault(sample.name, {})
    return seen


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_every_series_label_and_value_the_rules_name_is_in_a_real_scrape(served: Served) -> None:
    stream = served.openai().chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Hello"}], max_tokens=8, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    wanted = {name for rule in rules() for name, _ in SELECTOR.findall(str(rule["expr"]))}
    deadline = time.monotonic() + 30  # the engine's series once the worker has scraped it
    while not wanted <= set(seen := labels_seen(hearth_metrics(served.web))):
        assert time.monotonic() < deadline, f"named but not exported: {sorted(wanted - set(seen))}"
        time.sleep(0.5)
    for rule in rules():
        expr = str(rule["expr"])
        grouped = {label.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for label in by.split(",")}
        for name, matchers in SELECTOR.findall(expr):
            assert name in seen, f"{rule['alert']}: {name} is not exported"
            for label in grouped:
                assert label in seen[name], f"{rule['alert']}: {name} has no label {label}"
            for label, op, value in MATCHER.findall(matchers):
                assert label in seen[name], f"{rule['alert']}: {name} has no label {label}"
                wanted = value.split("|") if op == "=~" and "." not in value else [value] if op == "=" else []
                missing = set(wanted) - seen[name][label]
                assert not missing, f"{rule['alert']}: {name}{{{label}}} never takes {sorted(missing)}"
