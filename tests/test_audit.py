"""The audit log: an entry for every action issue 14 lists (who, when, from where, what changed), its page
with filters, its CSV and JSON exports, and the retention prune."""

import csv
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from console.audit.models import AuditEntry
from console.audit.recording import ACTIONS, record
from console.audit.tasks import prune_audit_log
from console.catalog.models import ModelSource
from console.deployments.models import Deployment, Replica
from tests.outside import ENGINE_KEY, OutsideSim
from tests.test_console import SMOLLM2_CONFIG

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"
JSON = "application/json"


def entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def test_key_actions_are_recorded_with_who_where_and_what_but_never_the_secret(root: Client) -> None:
    key = root.post(
        "/api/keys", {"name": "ci", "tokens_per_day": 100}, content_type=JSON, HTTP_USER_AGENT="curl/8"
    ).json()
    root.patch(f"/api/keys/{key['id']}", {"tokens_per_day": 50}, content_type=JSON)
    rotated = root.post(f"/api/keys/{key['id']}/rotate", {"grace_seconds": 0}, content_type=JSON).json()
    root.delete(f"/api/keys/{key['id']}")
    [create], [limits], [rotate], [revoke] = (
        entries(a) for a in ("key.create", "key.limits", "key.rotate", "key.revoke")
    )
    assert (create.actor_name, create.target_type, create.target_id, create.user_agent) == (
        "root",
        "access.apikey",
        str(key["id"]),
        "curl/8",
    )
    assert create.changes["prefix"] == key["prefix"] and create.changes["tokens_per_day"] == 100
    assert create.ip == "127.0.0.1" and create.at > timezone.now() - timedelta(minutes=1)
    assert limits.changes == {"tokens_per_day": [100, 50]}
    assert rotate.changes["prefix"] == [key["prefix"], rotated["prefix"]] and rotate.changes["grace_seconds"] == 0
    assert revoke.changes == {"prefix": rotated["prefix"]}
    everything = json.dumps(list(AuditEntry.objects.values()), default=str)
    assert key["key"] not in everything and rotated["key"] not in everything


def test_member_actions_are_recorded(root: Client) -> None:
    bob = root.post(
        "/api/members", {"username": "bob", "password": PASSWORD, "role": "viewer"}, content_type=JSON
    ).json()
    root.patch(f"/api/members/{bob['id']}", {"role": "member", "tokens_per_day": 500}, content_type=JSON)
    root.patch(f"/api/members/{bob['id']}", {"is_active": False}, content_type=JSON)
    assert entries("member.create")[-1].changes == {"role": "viewer"}
    assert entries("member.role")[-1].changes == {"role": ["viewer", "member"]}
    assert entries("member.limits")[-1].changes == {"tokens_per_day": [None, 500]}
    assert entries("member.active")[-1].changes == {"is_active": [True, False]}
    assert {e.target_name for e in AuditEntry.objects.filter(action__startswith="member.")} == {"bob"}


def test_a_password_change_is_recorded_without_the_password(root: Client) -> None:
    resp = root.post(
        "/password/",
        {"old_password": PASSWORD, "new_password1": "another-long-pw-2", "new_password2": "another-long-pw-2"},
    )
    assert resp.status_code == 302
    [entry] = entries("member.password")
    assert entry.changes == {} and "another-long-pw-2" not in json.dumps(list(AuditEntry.objects.values()), default=str)


def test_deployment_actions_are_recorded(root: Client) -> None:
    ModelSource.objects.create(name="smol", kind="local", path="/m", config=SMOLLM2_CONFIG, weights_bytes=269_030_016)
    dep = root.post(
        "/api/deployments", {"name": "smol", "model": "smol", "max_model_len": 2048}, content_type=JSON
    ).json()
    root.post(f"/api/deployments/{dep['id']}/launch")
    root.post(f"/api/deployments/{dep['id']}/stop")
    Deployment.objects.filter(pk=dep["id"]).update(state="stopped")
    root.post(f"/api/deployments/{dep['id']}/change", {"max_model_len": 1024, "confirm": True}, content_type=JSON)
    Deployment.objects.filter(pk=dep["id"]).update(state="failed")
    Replica.objects.create(
        deployment_id=dep["id"], runtime="process", host="h", port=1, engine_api_key="k", oom_killed=True
    )
    assert root.post(f"/api/deployments/{dep['id']}/remedy").status_code == 202
    Deployment.objects.filter(pk=dep["id"]).update(state="stopped")
    assert root.delete(f"/api/deployments/{dep['id']}").status_code == 204
    assert entries("deployment.create")[0].changes["served_model_name"] == "smol"
    assert [e.changes["state"] for e in entries("deployment.launch")] == [["stopped", "pending"], ["failed", "pending"]]
    assert entries("deployment.stop")[0].changes == {"state": ["pending", "stopping"]}
    assert entries("deployment.change")[0].changes == {"max_model_len": [2048, 1024], "recreate": False}
    assert entries("deployment.remedy")[0].changes == {
        "KV cache space (--kv-cache-memory-bytes)": ["1 GiB", "0.75 GiB"]
    }
    assert entries("deployment.delete")[0].target_name == "smol"
    assert {e.actor_name for e in AuditEntry.objects.filter(action__startswith="deployment.")} == {"root"}


@override_settings(AXES_FAILURE_LIMIT=3)
def test_sign_ins_failures_lockouts_and_sign_outs_are_recorded(client: Client, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "", PASSWORD)
    client.post("/login/", {"username": "root", "password": PASSWORD}, REMOTE_ADDR="10.0.0.9")
    client.post("/logout/")
    for _ in range(3):
        client.post("/login/", {"username": "root", "password": "wrong"}, REMOTE_ADDR="10.0.0.7")
    assert [(e.actor_name, e.ip) for e in entries("signin")] == [("root", "10.0.0.9")]
    assert entries("signin")[0].changes == {"method": "password"}
    assert [e.actor_name for e in entries("signout")] == ["root"]
    failed = entries("signin.failed")
    assert len(failed) == 3 and {(e.actor_name, e.target_name, e.ip) for e in failed} == {
        ("anonymous", "root", "10.0.0.7")
    }
    [lockout] = entries("signin.lockout")
    assert (lockout.target_name, lockout.changes) == ("root", {"ip_address": "10.0.0.7"})
    assert "wrong" not in json.dumps(list(AuditEntry.objects.values()), default=str)


@pytest.mark.process
def test_engines_hearth_did_not_launch_are_recorded_without_their_key(root: Client, tmp_path: Any) -> None:
    first, second = (OutsideSim(tmp_path / f"{n}.log", "outside") for n in ("first", "second"))
    try:
        dep = root.post(
            "/api/external-deployments",
            {"base_url": first.base, "engine_kind": "vllm", "api_key": ENGINE_KEY},
            content_type=JSON,
        ).json()
        added = root.post(
            f"/api/deployments/{dep['id']}/endpoints",
            {"base_url": second.base, "engine_kind": "vllm", "api_key": ENGINE_KEY},
            content_type=JSON,
        ).json()
        assert root.delete(f"/api/deployments/{dep['id']}/endpoints/{added['replicas'][1]['id']}").status_code == 204
    finally:
        first.stop()
        second.stop()
    [register] = entries("deployment.register")
    assert register.actor_name == "root" and register.changes["base_url"] == first.base
    assert register.changes["engine_version"] == "0.32.0+sim" and register.changes["engine_api_key"] == "set"
    assert entries("deployment.add_endpoint")[0].changes["base_url"] == second.base
    assert entries("deployment.remove_endpoint")[0].changes == {"base_url": second.base}
    assert ENGINE_KEY not in json.dumps(list(AuditEntry.objects.values()), default=str)


def test_models_prices_slos_and_mappings_are_recorded_with_what_changed(root: Client) -> None:
    assert root.post("/api/models", {"demo": "qwen3-8b"}, content_type=JSON).status_code == 201
    [added] = entries("model.add")
    assert (added.actor_name, added.target_name, added.changes["kind"]) == ("root", "qwen3-8b", "demo")
    for price in ("2.5", "3"):
        root.post("/costs/", {"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": price, "source": "quote"})
    first, second = (e.changes for e in entries("price.set"))  # the first changes the seeded price
    assert first["usd_per_gpu_hour"][1] == "2.5" and first["source"][1] == "quote" and "gpu_model" not in first
    assert second == {"usd_per_gpu_hour": ["2.5000", "3"]}
    dep = root.post(
        "/api/deployments", {"name": "q", "model": "qwen3-8b", "engine": "simulator"}, content_type=JSON
    ).json()
    root.post(f"/deployments/{dep['id']}/slo/", {"ttft_seconds": "1.5", "itl_seconds": ""})
    [slo] = entries("deployment.slo")
    assert (slo.target_name, slo.changes) == ("q", {"ttft_seconds": [None, 1.5]})
    assert (
        root.post(
            f"/api/deployments/{dep['id']}/slo", {"ttft_seconds": 4, "itl_seconds": 0.1}, content_type=JSON
        ).status_code
        == 200
    )
    [again] = [e for e in entries("deployment.slo") if e.pk != slo.pk]  # the Capacity page's API: the same SLO
    assert again.changes == {"ttft_seconds": [1.5, 4], "itl_seconds": [None, 0.1]}
    mapping = {
        "flavor": "tgi",
        "engine": "tgi",
        "canonical": "requests_running",
        "metric": "tgi_batch_current_size",
        "source": "text-generation-inference docs, Metrics",
    }
    root.post("/metric-mappings/", mapping)
    assert entries("mapping.set")[0].changes["metric"] == [None, "tgi_batch_current_size"]
    Deployment.objects.filter(pk=dep["id"]).update(state="stopped")
    root.delete(f"/api/deployments/{dep['id']}")
    assert root.delete(f"/api/models/{ModelSource.objects.get().pk}").status_code == 204
    [deleted] = entries("model.delete")
    assert (deleted.target_name, deleted.changes["kind"]) == ("qwen3-8b", "demo")


def test_every_action_the_log_knows_is_one_a_test_here_records() -> None:
    """slo.merged is recorded by a migration: tests/test_one_slo_migration.py; accounting.mended by beat's
    accounting check: tests/test_charge_check.py; deployment.sleep, .idle_policy by tests/test_idle_settings.py,
    deployment.limits by tests/test_serving_limits.py, deployment.wake and .stop_idle by the worker:
    tests/test_sleep_live.py; deployment.make_room by the worker: tests/test_room_live.py; weights.free by
    tests/test_weights_cache.py; deployment.price by tests/test_money.py; batch.cancel by
    tests/test_batches_page.py; alerts.rule and .destination by tests/test_alert_conditions.py; alerts.test by
    tests/test_alerts.py; backup.create and .restore by manage.py in tests/test_backup_restore.py."""
    tested = {
        "backup.create",
        "backup.restore",
        "key.create",
        "key.limits",
        "key.rotate",
        "key.revoke",
        "member.create",
        "member.role",
        "member.limits",
        "member.active",
        "member.password",
        "deployment.create",
        "deployment.launch",
        "deployment.stop",
        "deployment.change",
        "deployment.limits",
        "deployment.remedy",
        "deployment.delete",
        "signin",
        "signin.failed",
        "signin.lockout",
        "signout",
        "deployment.register",
        "deployment.add_endpoint",
        "deployment.remove_endpoint",
        "deployment.slo",
        "model.add",
        "model.delete",
        "price.set",
        "deployment.price",
        "mapping.set",
        "slo.merged",
        "accounting.mended",
        "deployment.sleep",
        "deployment.wake",
        "deployment.stop_idle",
        "deployment.idle_policy",
        "deployment.make_room",
        "weights.free",
        "batch.cancel",
        "alerts.rule",
        "alerts.destination",
        "alerts.test",
    }
    assert set(ACTIONS) == tested


def test_the_page_filters_and_the_exports_carry_the_same_entries(root: Client) -> None:
    for name in ("alpha", '=HYPERLINK("http://x")'):
        root.post("/api/keys", {"name": name}, content_type=JSON)
    page = root.get("/audit/?action=key.create&target=alpha").content.decode()
    assert "alpha" in page and "HYPERLINK" not in page
    refused = root.get("/audit/?since=yesterday")
    assert refused.status_code == 400
    assert f"Entries are kept {settings.HEARTH_AUDIT_RETENTION_DAYS} days" in refused.content.decode()  # as ever
    rows = list(csv.DictReader(io.StringIO(root.get("/audit/export.csv?action=key.").content.decode())))
    assert [r["action"] for r in rows] == ["key.create", "key.create"]  # newest first
    assert rows[0]["target"].startswith("'=HYPERLINK") and rows[1]["target"].startswith("alpha (hk-")
    assert json.loads(rows[1]["changes"])["prefix"].startswith("hk-")
    exported = root.get("/audit/export.json?actor=root&action=key.create").json()
    assert [e["target"].split(" (")[0] for e in exported] == ['=HYPERLINK("http://x")', "alpha"]
    assert root.get("/api/audit?action=key.create").json() == exported


def test_entries_older_than_the_retention_are_pruned() -> None:
    old = record(None, "signout", "someone")
    AuditEntry.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=400))
    recent = record(None, "signout", "someone else")
    assert old.actor_name == "system"
    with override_settings(HEARTH_AUDIT_RETENTION_DAYS=365):
        assert prune_audit_log() == 1
    assert list(AuditEntry.objects.values_list("pk", flat=True)) == [recent.pk]


def test_an_edit_from_or_to_nothing_reads_none_on_the_page() -> None:
    """A fresh user's trial: an email destination set from empty read "email_to: → a@b.co"."""
    entry = AuditEntry(changes={"email_to": ["", "a@b.co"], "limit": [5, None], "note": None, "name": ["a", "b"]})
    assert entry.changes_in_words() == [
        ("email_to", "none → a@b.co"),
        ("limit", "5 → none"),
        ("note", "none"),
        ("name", "a → b"),
    ]
