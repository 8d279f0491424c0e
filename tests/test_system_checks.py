"""Configuration mistakes are named by Django's system checks (appliance.system_checks), with their ids."""

from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.test import override_settings


def ids(**changed: object) -> set[str]:
    with override_settings(**changed):
        return {message.id for message in run_checks() if message.id and message.id.startswith("appliance.")}


def test_the_test_settings_pass() -> None:
    assert ids() == set()


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        ({"HEARTH_RUNTIME": "podman"}, "appliance.E001"),
        ({"HEARTH_GPU_INVENTORY": "sim:9xNOPE"}, "appliance.E002"),
        ({"HEARTH_GPU_INVENTORY": "cuda"}, "appliance.E002"),
        ({"HEARTH_TRUSTED_PROXIES": ["10.0.0.0/33"]}, "appliance.E003"),
        ({"REDIS_URL": "http://127.0.0.1:6379/0"}, "appliance.E004"),
        ({"HEARTH_SCRAPE_INTERVAL": 0.0}, "appliance.E005"),
        ({"HEARTH_MAX_BODY_BYTES": -1}, "appliance.E005"),
        ({"HEARTH_HF_TOKEN_FILE": "/nonexistent/hf-token"}, "appliance.E006"),
        ({"HEARTH_EXTERNAL_ALLOW": ["127.0.0.0/8", "localhost"]}, "appliance.E007"),
    ],
)
def test_each_mistake_is_named_by_its_id(changed: dict[str, object], expected: str) -> None:
    assert ids(**changed) == {expected}


def test_a_readable_token_file_and_known_profiles_pass(tmp_path: Path) -> None:
    token = tmp_path / "hf-token"
    token.write_text("hf_x")
    good = {"HEARTH_HF_TOKEN_FILE": str(token), "HEARTH_GPU_INVENTORY": "sim:1xL40S-48GB", "HEARTH_RUNTIME": "docker"}
    assert ids(**good) == set()
