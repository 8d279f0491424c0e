"""A deployment's serving limits (console.deployments.serving_limits: its max_tokens cap and fit_max_tokens) changed
on a running deployment act at once, from the console's change page and the API: nothing recreated, audited, the
gateways told, the plan's coding agents judged anew. No process: the gateway applying a changed cap is
tests/test_fit_by_default.py's."""

import pytest
from django.test import Client

from console.audit.models import AuditEntry
from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.changes import current_settings
from console.deployments.models import Deployment, DeploymentState, Replica
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db
JSON = "application/json"


@pytest.fixture
def dep() -> Deployment:
    ensure_model()
    model = ModelSource.objects.get(name="llama-8b")
    made = admin_actions.create_deployment(name="live", model=model, engine="simulator", max_model_len=32768)
    Deployment.objects.filter(pk=made.pk).update(state=DeploymentState.READY)
    made.refresh_from_db()
    return made


def shown(dep: Deployment, **changes: object) -> dict[str, object]:
    """The change page's fields as it shows them for ``dep``, with ``changes`` over them."""
    now = current_settings(dep) | {"idle_policy": "stay", "idle_minutes": 30, "sleep_level": 1, "extra_args": ""}
    return {k: ("on" if v is True else v) for k, v in now.items() if v is not False} | changes


def test_the_change_page_sets_a_cap_at_once_and_the_deployment_page_says_it(
    admin: Client, dep: Deployment, django_capture_on_commit_callbacks: object
) -> None:
    url = f"/deployments/{dep.pk}/change/"
    page = admin.get(url).content.decode()
    assert 'name="max_tokens_cap"' in page and "acts at once" in page
    preview = admin.post(url, shown(dep, max_tokens_cap=4096)).content.decode()
    assert 'data-field="recreate"' not in preview and "Confirm: save these settings" in preview
    assert "<strong>Nothing is relaunched:</strong> these settings act at once, on the engine serving now." in preview
    assert Deployment.objects.get(pk=dep.pk).max_tokens_cap is None  # a preview changes nothing

    with django_capture_on_commit_callbacks(execute=True) as announced:  # type: ignore[operator]
        resp = admin.post(url, shown(dep, max_tokens_cap=4096, confirm=""), follow=True)
    row = Deployment.objects.get(pk=dep.pk)
    assert (row.max_tokens_cap, row.state) == (4096, DeploymentState.READY)  # nothing recreated
    assert announced, "the gateways are told"
    html = resp.content.decode()
    assert "Saved live&#x27;s settings: they act at once, nothing relaunched." in html
    assert 'data-field="serving-limits">max_tokens capped at 4,096; fitted to the context left<' in html
    entry = AuditEntry.objects.get(action="deployment.limits")
    assert entry.changes == {"max_tokens_cap": [None, 4096]}

    cleared = admin.post(url, shown(dep, max_tokens_cap="", confirm=""), follow=True).content.decode()
    assert Deployment.objects.get(pk=dep.pk).max_tokens_cap is None and "no max_tokens cap" in cleared
    again = admin.post(url, shown(dep, confirm=""), follow=True).content.decode()
    assert "Nothing changed: live&#x27;s settings are as they were." in again


def test_the_change_page_refuses_a_cap_that_is_no_number_of_tokens(admin: Client, dep: Deployment) -> None:
    for bad, why in ((0, "greater than or equal to 1"), (2**31, "less than or equal to 2147483647")):
        page = admin.post(f"/deployments/{dep.pk}/change/", shown(dep, max_tokens_cap=bad, confirm=""))
        assert page.status_code == 200 and why in page.content.decode()
    assert Deployment.objects.get(pk=dep.pk).max_tokens_cap is None


def test_an_engine_setting_with_a_cap_still_recreates(admin: Client, dep: Deployment) -> None:
    page = admin.post(f"/deployments/{dep.pk}/change/", shown(dep, max_tokens_cap=64, max_num_seqs=32))
    assert 'data-field="recreate"' in page.content.decode()


def test_the_api_sets_and_clears_a_cap_at_once(admin: Client, dep: Deployment) -> None:
    url = f"/api/deployments/{dep.pk}/change"
    preview = admin.post(url, {"max_tokens_cap": 512}, content_type=JSON).json()
    assert preview["recreate"] is False, preview
    done = admin.post(url, {"max_tokens_cap": 512, "confirm": True}, content_type=JSON)
    assert done.status_code == 202 and (done.json()["state"], done.json()["max_tokens_cap"]) == ("ready", 512)
    same = changes_with_current(dep) | {"max_tokens_cap": 256, "confirm": True}
    assert admin.post(url, same, content_type=JSON).json()["state"] == "ready"  # settings as they are: at once
    cleared = admin.post(url, {"max_tokens_cap": None, "confirm": True}, content_type=JSON).json()
    assert cleared["max_tokens_cap"] is None and cleared["state"] == "ready"
    kept = admin.post(url, {"idle_minutes": 5, "confirm": True}, content_type=JSON).json()
    assert kept["max_tokens_cap"] is None  # not given: kept


@pytest.mark.parametrize(
    ("cap", "why"), [(0, "The max_tokens cap must be from 1 to 2,147,483,647"), ("5", "a whole number")]
)
def test_the_api_refuses_a_bad_cap_with_a_400(admin: Client, dep: Deployment, cap: object, why: str) -> None:
    resp = admin.post(f"/api/deployments/{dep.pk}/change", {"max_tokens_cap": cap, "confirm": True}, content_type=JSON)
    assert resp.status_code == 400 and why in str(resp.json()["detail"]), resp.json()
    assert Deployment.objects.get(pk=dep.pk).max_tokens_cap is None


def test_fit_max_tokens_alone_acts_at_once_and_the_plan_judges_the_agents_anew(admin: Client, dep: Deployment) -> None:
    before = {a["name"]: a["serves"] for a in dep.plan["agents"]}
    url = f"/api/deployments/{dep.pk}/change"
    preview = admin.post(url, {"fit_max_tokens": False}, content_type=JSON).json()
    after = {a["name"]: a["serves"] for a in preview["plan"]["agents"]}
    assert preview["recreate"] is False and before != after, (before, after)
    done = admin.post(url, {"fit_max_tokens": False, "confirm": True}, content_type=JSON).json()
    assert done["state"] == "ready" and done["fit_max_tokens"] is False
    assert {a["name"]: a["serves"] for a in done["plan"]["agents"]} == after


def changes_with_current(dep: Deployment) -> dict[str, object]:
    """The API's change body with every engine setting as the deployment has it."""
    return {k: v for k, v in current_settings(dep).items() if k != "fit_max_tokens"}


def test_a_cap_is_in_the_agents_verdict_before_and_after_it_is_saved(admin: Client, dep: Deployment) -> None:
    url = f"/api/deployments/{dep.pk}/change"
    admin.post(url, {"fit_max_tokens": False, "confirm": True}, content_type=JSON)
    assert not {a["name"]: a["serves"] for a in Deployment.objects.get(pk=dep.pk).plan["agents"]}["Claude Code"]
    preview = admin.post(url, {"max_tokens_cap": 1000}, content_type=JSON).json()
    claude = next(a for a in preview["plan"]["agents"] if a["name"] == "Claude Code")
    assert claude["serves"] and "the deployment's max_tokens cap making it 1,000" in claude["reason"], claude
    assert "Its answers stop at 1,000 tokens: a longer one comes back cut" in claude["reason"]
    with_seqs = admin.post(url, {"max_tokens_cap": 1000, "max_num_seqs": 32}, content_type=JSON).json()
    assert (
        with_seqs["recreate"] and next(a for a in with_seqs["plan"]["agents"] if a["name"] == "Claude Code")["serves"]
    )
    admin.post(url, {"max_tokens_cap": 1000, "confirm": True}, content_type=JSON)
    stored = Deployment.objects.get(pk=dep.pk).plan["agents"]
    assert next(a for a in stored if a["name"] == "Claude Code")["serves"]
    page = admin.get(f"/deployments/{dep.pk}/").content.decode()
    assert "making it 1,000" in page  # the Coding agents tab
    assert "or this deployment one (it has 1,000)" in page


def test_the_preview_says_when_sleep_waits_for_a_relaunch(admin: Client, dep: Deployment) -> None:
    Replica.objects.create(
        deployment=dep,
        runtime="process",
        host="127.0.0.1",
        port=9,
        engine_api_key="k",
        running=True,
        ready_at=dep.created_at,
        sleep_mode=False,  # launched while the policy was stay
    )
    url = f"/deployments/{dep.pk}/change/"
    page = admin.post(url, shown(dep, idle_policy="sleep", idle_minutes=1)).content.decode()
    assert 'data-field="sleep-after-relaunch"><strong>Sleep needs a relaunch:</strong>' in page
    assert "sleep-after-relaunch" not in admin.post(url, shown(dep, idle_policy="stop")).content.decode()
    Replica.objects.filter(deployment=dep).update(sleep_mode=True)
    assert "sleep-after-relaunch" not in admin.post(url, shown(dep, idle_policy="sleep")).content.decode()
