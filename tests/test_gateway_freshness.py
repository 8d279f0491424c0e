"""Keys and routes are never served stale, on two real gateway processes: bursts of 200 requests sent at
once to each, right after a key is created, after it is revoked, after the processes start, and after a
deployment becomes ready, all get the right answer; a change nobody announced (no bump) still takes hold
within the periodic re-check; a rotated key's old secret works through its grace and not a moment after."""

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from console.access import keys as apikeys
from console.access.key_format import key_prefix
from console.access.models import ApiKey
from gateway.errors import GatewayError
from gateway.registry import RECHECK_EVERY, authenticate, load_snapshot
from tests.conftest import Workers, login
from tests.gatewayworld import bearer, burst, gateway_processes, status_of, statuses, within
from tests.simworld import deploy, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
BURST = 200


@pytest.fixture(scope="module")
def two(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two gateway processes on the session's database and Redis."""
    with gateway_processes(2, live_env, tmp_path_factory.mktemp("two-gateways")) as bases:
        yield bases


def warm(bases: list[str], key: str) -> None:
    """Each gateway has loaded a snapshot and answers ``key``: what comes next finds one in place."""
    for base in bases:
        assert status_of(base, key) == 200


def test_a_created_key_is_accepted_by_every_request_of_a_burst(two: list[str], admin_user: object) -> None:
    warm(two, apikeys.create_key("warm", admin_user)[1])
    _, key = apikeys.create_key("new", admin_user)
    answers = burst(two, BURST, key=key)
    assert statuses(answers) == {base: {200: BURST} for base in two}


def test_a_revoked_key_is_refused_by_every_request_of_a_burst(two: list[str], admin_user: object) -> None:
    row, key = apikeys.create_key("doomed", admin_user)
    warm(two, key)
    apikeys.revoke_key(row, admin_user)
    answers = burst(two, BURST, key=key)
    assert statuses(answers) == {base: {401: BURST} for base in two}
    assert {a[1]["error"]["code"] for got in answers.values() for a in got} == {"invalid_api_key"}


def test_no_valid_request_gets_401_right_after_start(
    live_env: dict[str, str], tmp_path: Path, admin_user: object
) -> None:
    _, key = apikeys.create_key("from-the-start", admin_user)
    with gateway_processes(2, live_env, tmp_path) as fresh:  # up means /login/ answers; the gateway read nothing yet
        answers = burst(fresh, BURST, key=key)
    assert statuses(answers) == {base: {200: BURST} for base in fresh}


def test_a_deployment_that_became_ready_is_routed_by_every_request_of_a_burst(
    two: list[str], worker: Workers, admin_user: object
) -> None:
    _, key = apikeys.create_key("chat", admin_user)
    warm(two, key)
    client = login(two[0])
    dep_id = deploy(two[0], client, "fresh")
    deadline = time.monotonic() + 60
    while (state := client.get(f"/api/deployments/{dep_id}").json()["state"]) not in ("ready", "failed"):
        assert time.monotonic() < deadline, state
        time.sleep(0.01)  # the burst leaves within ~10 ms of the console saying ready
    assert state == "ready", worker.output()[-3000:]
    body = {"model": "fresh", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
    answers = burst(two, BURST, "/v1/chat/completions", key=key, method="POST", body=body)
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})
    assert statuses(answers) == {base: {200: BURST} for base in two}
    assert {a[1]["model"] for got in answers.values() for a in got} == {"fresh"}


def test_a_change_nobody_announced_takes_hold_within_the_periodic_recheck(two: list[str], admin_user: object) -> None:
    row, key = apikeys.create_key("unannounced", admin_user)
    warm(two, key)
    ApiKey.objects.filter(pk=row.pk).update(revoked_at=timezone.now())  # no bump: as if Redis lost it
    for base in two:
        within(RECHECK_EVERY + 1, lambda: status_of(base, key) == 401)  # noqa: B023 - called at once


def test_a_rotated_keys_old_secret_works_through_its_grace_and_not_after(two: list[str], admin_user: object) -> None:
    row, old = apikeys.create_key("rotating", admin_user)
    warm(two, old)
    new = apikeys.rotate_key(row, admin_user, grace_seconds=8)  # its checks below take seconds on a loaded CI box
    row.refresh_from_db()
    assert row.previous_valid_until is not None
    until = row.previous_valid_until.timestamp()
    for base in two:
        assert status_of(base, new) == 200 and status_of(base, old) == 200
    time.sleep(max(0.0, until - time.time()))
    for base in two:
        answer = httpx.get(f"{base}/v1/models", headers=bearer(old))
        assert answer.status_code == 401, answer.text
        assert "rotated" in answer.json()["error"]["message"]
        assert status_of(base, new) == 200


def test_a_rotation_without_grace_refuses_the_old_secret_at_once(two: list[str], admin_user: object) -> None:
    row, old = apikeys.create_key("rotate-now", admin_user)
    warm(two, old)
    new = apikeys.rotate_key(row, admin_user, grace_seconds=0)
    answers = burst(two, BURST, key=old)
    assert statuses(answers) == {base: {401: BURST} for base in two}
    assert statuses(burst(two, BURST, key=new)) == {base: {200: BURST} for base in two}


def test_an_expiry_is_checked_on_each_request_not_at_each_reload(two: list[str], admin_user: object) -> None:
    row, key = apikeys.create_key("expiring", admin_user)
    apikeys.set_key_limits(row, admin_user, expires_at=timezone.now() + timedelta(seconds=2))
    row.refresh_from_db()
    assert row.expires_at is not None
    warm(two, key)
    time.sleep(max(0.0, row.expires_at.timestamp() - time.time()))
    for base in two:
        answer = httpx.get(f"{base}/v1/models", headers=bearer(key))
        assert answer.status_code == 401 and "expired" in answer.json()["error"]["message"], answer.text


def test_the_snapshot_accepts_exactly_the_secrets_the_key_model_says(admin_user: object) -> None:
    """gateway.registry.authenticate against console.access.models.ApiKey.secrets_at, at moments around a
    rotation's grace end and the key's expiry."""
    row, old = apikeys.create_key("both-ends", admin_user)
    new = apikeys.rotate_key(row, admin_user, grace_seconds=60)
    ApiKey.objects.filter(pk=row.pk).update(expires_at=timezone.now() + timedelta(seconds=120))
    row.refresh_from_db()
    snapshot = load_snapshot()
    for offset in (0, 59, 61, 119, 121):
        at = timezone.now() + timedelta(seconds=offset)
        live = {prefix for prefix, _, _ in row.secrets_at(at)}
        for secret in (old, new):
            try:
                authenticate(snapshot, secret, at.timestamp())
                accepted = True
            except GatewayError:
                accepted = False
            assert accepted == (key_prefix(secret) in live), (offset, key_prefix(secret), live)
