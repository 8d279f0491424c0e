"""A deployment's page and the fragments its polls swap in agree on the ids that carry each part (issue 33, point
3): the state's poll answers #state and #runs (the Engine tab's, swapped by id), the live panel's answers #panel
and the Engine and Usage tabs' #panel-engine and #panel-usage; the page holds a tab panel for each, and the tab bar
names them."""

import re

import pytest
from django.test import Client

from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from tests.test_console import smollm2

pytestmark = pytest.mark.django_db
__all__ = ["smollm2"]  # the fixture this module takes from test_console


def ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_the_page_and_its_fragments_share_the_ids_the_polls_swap(admin: Client, smollm2: ModelSource) -> None:
    body = {"name": "smol", "model": smollm2.pk, "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1}
    admin.post("/deployments/", body)
    dep = Deployment.objects.get()
    page = admin.get(f"/deployments/{dep.pk}/").content.decode()
    status = admin.get(f"/deployments/{dep.pk}/status/").content.decode()
    panel = admin.get(f"/deployments/{dep.pk}/panel/").content.decode()

    assert {"state", "runs"} <= ids(status)
    assert {"panel", "panel-engine", "panel-usage"} <= ids(panel)
    assert {"state", "runs", "live", "panel", "panel-engine", "panel-usage", "charts", "logs"} <= ids(page)
    assert 'hx-select="#state" hx-select-oob="#runs"' in page
    assert 'hx-select="#panel" hx-select-oob="#panel-engine,#panel-usage"' in page
    tabs = re.findall(r'role="tab" data-tab="([a-z]+)"', page)
    assert tabs == ["history", "engine", "usage", "log", "plan", "agents"]
    assert all(f'data-tab-panel="{t}"' in page for t in tabs)
    assert not ids(page) & set(tabs)  # a fragment (#engine) opens its tab and never scrolls to an element
