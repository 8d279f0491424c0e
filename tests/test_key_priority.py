"""Priority classes per key (issue 30): access 0004 keeps every key and member (keys "": their owner's default;
members standard), a key's effective class (its own, else its member's default, else standard) reaches the gateway's
snapshot, only an admin grants interactive (form and API), and the request log's class and batch id are written by
the gateway's row path and split the usage page and its CSV. A real request at class batch: test_batch_price.py."""

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.apps.registry import Apps
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from console.access import keys
from console.access.models import ApiKey, Member, Priority
from console.observability.models import RequestLog
from gateway.accounting import Outcome, write
from gateway.reaper import cut_row
from gateway.snapshot import load_snapshot
from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db(transaction=True)
ACCESS_BEFORE = [("access", "0003_members_rotation_budgets")]
ACCESS_AFTER = [("access", "0004_key_priority")]
LOG_BEFORE = [("observability", "0013_deployment_price")]
LOG_AFTER = [("observability", "0014_request_log_priority")]


@pytest.fixture
def access_before() -> Any:
    with schema_at(ACCESS_BEFORE) as apps:
        yield apps


def test_access_0004_keeps_keys_and_members_keys_at_their_owners_default(access_before: Apps) -> None:
    user = access_before.get_model("auth", "User").objects.create(username="old")
    access_before.get_model("access", "Member").objects.create(user=user, role="member", max_keys=3)
    access_before.get_model("access", "ApiKey").objects.create(
        name="laptop", prefix="hk-old1", key_hash="a" * 64, owner=user, tokens_per_day=500, allowed_models=["llama"]
    )
    after = migrate(ACCESS_AFTER)
    key = after.get_model("access", "ApiKey").objects.get()
    member = after.get_model("access", "Member").objects.get()
    assert (key.name, key.prefix, key.key_hash, key.tokens_per_day, key.allowed_models, key.priority) == (
        "laptop",
        "hk-old1",
        "a" * 64,
        500,
        ["llama"],
        "",
    )
    assert (member.max_keys, member.default_priority) == (3, "standard")
    back = migrate(ACCESS_BEFORE).get_model("access", "ApiKey").objects.get()
    assert (back.prefix, back.tokens_per_day) == ("hk-old1", 500)


def test_observability_0014_reads_old_request_rows_as_standard_without_a_batch() -> None:
    with schema_at(LOG_BEFORE) as before:
        fields = {"model": "m", "surface": "openai", "endpoint": "/v1/chat/completions", "status": 200}
        logs = before.get_model("observability", "RequestLog")
        logs.objects.create(created_at=timezone.now(), duration_seconds=1.5, request_id="b" * 32, **fields)
        [row] = migrate(LOG_AFTER).get_model("observability", "RequestLog").objects.all()
        assert (row.request_id, row.duration_seconds, row.priority, row.batch_id) == ("b" * 32, 1.5, "standard", "")


def _key(owner: Any, priority: str = "") -> ApiKey:
    row, _ = keys.create_key(f"k-{priority or 'default'}", owner, priority=priority)
    return row


def test_the_effective_class_is_the_keys_else_its_members_default_else_standard(admin_user: Any) -> None:
    mia = User.objects.create_user("mia", password="mia-password-1234")
    member = Member.objects.create(user=mia, role="member", default_priority=Priority.BATCH)
    own, inherited = _key(mia, "standard"), _key(mia)
    no_member = _key(User.objects.create_user("ghost", password="ghost-password-1234"))
    orphan = ApiKey.objects.create(name="orphan", prefix="hk-orph", key_hash="c" * 64)
    assert [k.effective_priority for k in (own, inherited, no_member, orphan)] == [
        "standard",
        "batch",
        "standard",
        "standard",
    ]
    keys.rotate_key(inherited, mia, 600)
    inherited.refresh_from_db()
    snap = load_snapshot()
    assert snap.keys[own.prefix].priority == "standard"
    assert snap.keys[inherited.prefix].priority == snap.keys[inherited.previous_prefix].priority == "batch"
    assert snap.keys[no_member.prefix].priority == snap.keys[orphan.prefix].priority == "standard"
    member.default_priority = Priority.INTERACTIVE
    member.save()
    assert load_snapshot().keys[inherited.prefix].priority == "interactive"


def _signed_in(client: Client, username: str) -> Client:
    client.force_login(User.objects.get(username=username))
    return client


def test_a_member_may_pick_standard_or_batch_but_not_interactive(client: Client, member: Any) -> None:
    _signed_in(client, member.username)
    page = client.get("/keys/").content.decode()
    assert 'value="batch"' in page and 'value="interactive"' not in page
    assert "Interactive: never held." in page  # the field's help says what each class means
    refused = client.post("/keys/", {"name": "sneaky", "priority": "interactive"})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not ApiKey.objects.filter(name="sneaky").exists()
    assert client.post("/keys/", {"name": "nightly", "priority": "batch"}).status_code == 302
    nightly = ApiKey.objects.get(name="nightly")
    assert nightly.priority == "batch"
    listed = client.get("/keys/").content.decode()
    assert 'data-field="class">batch<' in listed

    api = client.post("/api/keys", {"name": "api-sneaky", "priority": "interactive"}, content_type="application/json")
    assert api.status_code == 400 and "Only an admin grants the interactive class" in api.json()["detail"]
    unknown = client.post("/api/keys", {"name": "x", "priority": "urgent"}, content_type="application/json")
    assert unknown.status_code == 400 and "Unknown class 'urgent'" in unknown.json()["detail"]
    assert not ApiKey.objects.filter(name__in=["api-sneaky", "x"]).exists()
    patched = client.patch(f"/api/keys/{nightly.pk}", {"priority": "interactive"}, content_type="application/json")
    assert patched.status_code == 400
    back = client.patch(f"/api/keys/{nightly.pk}", {"priority": None}, content_type="application/json").json()
    assert (back["priority"], back["effective_priority"]) == ("", "standard")


def test_interactive_is_admin_granted_and_kept_when_its_member_changes_other_limits(
    client: Client, admin_user: Any, member: Any
) -> None:
    own = _key(member)
    _signed_in(client, admin_user.username)
    granted = client.patch(f"/api/keys/{own.pk}", {"priority": "interactive"}, content_type="application/json")
    assert granted.status_code == 200 and granted.json()["effective_priority"] == "interactive"
    _signed_in(client, member.username)
    kept = client.post(f"/keys/{own.pk}/", {"priority": "interactive", "requests_per_minute": "30"})
    assert kept.status_code == 302
    own.refresh_from_db()
    assert (own.priority, own.requests_per_minute) == ("interactive", 30)
    assert 'data-field="class">interactive<' in client.get(f"/keys/{own.pk}/").content.decode()
    _signed_in(client, admin_user.username)
    made = client.patch(
        f"/api/members/{member.pk}", {"default_priority": "interactive"}, content_type="application/json"
    )
    assert made.status_code == 200 and made.json()["limits"]["default_priority"] == "interactive"
    _signed_in(client, member.username)
    assert client.post("/keys/", {"name": "granted", "priority": "interactive"}).status_code == 302
    assert ApiKey.objects.get(name="granted").effective_priority == "interactive"


def test_the_member_form_sets_a_default_class(client: Client, admin_user: Any, member: Any) -> None:
    _signed_in(client, admin_user.username)
    page = client.get(f"/members/{member.pk}/").content.decode()
    assert 'name="default_priority"' in page and "Batch: waits first, charged at the batch price factor." in page
    form = {"role": "member", "is_active": "on", "default_priority": "batch"}
    assert client.post(f"/members/{member.pk}/", form).status_code == 302
    assert Member.objects.get(user=member).default_priority == "batch"
    assert _key(User.objects.get(pk=member.pk)).effective_priority == "batch"
    bad = client.patch(f"/api/members/{member.pk}", {"default_priority": "urgent"}, content_type="application/json")
    assert bad.status_code == 400


def test_the_gateway_row_path_writes_the_class_and_batch_id(admin_user: Any) -> None:
    key = _key(admin_user, "batch")
    line = Outcome(key.id, key.prefix, "llama", "openai", "/v1/chat/completions", False, status=200)
    line.priority, line.batch_id, line.ended_at = "batch", "batch_abc123", datetime.now(UTC).timestamp()
    plain = Outcome(key.id, key.prefix, "llama", "openai", "/v1/chat/completions", False, status=200)
    plain.ended_at = line.ended_at
    assert write([line, plain]) == 2
    rows = {r.request_id: (r.priority, r.batch_id) for r in RequestLog.objects.all()}
    assert rows == {line.request_id: ("batch", "batch_abc123"), plain.request_id: ("standard", "")}
    note = {"key_id": key.id, "prefix": key.prefix, "model": "llama", "surface": "openai", "started": 1.0}
    note |= {"endpoint": "/v1/chat/completions", "stream": True, "priority": "batch", "batch_id": "batch_abc123"}
    cut = cut_row("c" * 32, note)  # a request whose gateway process died keeps its class
    assert (cut["priority"], cut["batch_id"]) == ("batch", "batch_abc123")


def _logged(key: ApiKey, priority: str, tokens: int, cost: str) -> None:
    RequestLog.objects.create(
        api_key=key,
        model="llama",
        surface="openai",
        endpoint="/v1/chat/completions",
        status=200,
        prompt_tokens=tokens,
        completion_tokens=tokens,
        duration_seconds=1.0,
        cost_usd=Decimal(cost),
        priority=priority,
    )


def test_usage_and_its_csv_show_batch_apart(client: Client, admin_user: Any) -> None:
    key = _key(admin_user)
    _logged(key, "standard", 10, "0.002")
    _logged(key, "standard", 10, "0.002")
    _logged(key, "batch", 100, "0.01")
    _signed_in(client, admin_user.username)
    table = list(csv.DictReader(io.StringIO(client.get("/usage/export.csv?group=key").content.decode())))
    assert [(r["class"], r["requests"], r["completion_tokens"], r["cost_usd"]) for r in table] == [
        ("batch", "1", "100", "0.01"),
        ("standard", "2", "20", "0.004"),
    ]
    page = client.get("/usage/?group=model").content.decode()
    assert 'data-row="batch"' in page and "Of which batch" in page and "0.5 × the price" in page
    rows = client.get("/api/usage?group=member").json()
    assert {(r["priority"], r["requests"]) for r in rows} == {("batch", 1), ("standard", 2)}
