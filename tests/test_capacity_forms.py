"""The capacity page's forms say what they need in words (a fresh user's trials)."""

import pytest
from django.test import Client

from tests.test_console_display import a_deployment

pytestmark = pytest.mark.django_db


def test_a_tuning_without_the_downtime_ticked_says_what_the_tick_is_for(admin: Client) -> None:
    """A fresh user's trial got only "This field is required." under the box."""
    dep = a_deployment("tuned")
    fields = {"tune-knob": "max_num_seqs", "tune-values": "64, 128", "tune-profile": "chat", "tune-mode": "concurrency"}
    page = admin.post(f"/deployments/{dep.pk}/capacity/tune/", fields).content.decode()
    assert "Tick this to tune: each value relaunches the deployment" in page
