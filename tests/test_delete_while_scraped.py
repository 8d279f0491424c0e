"""A deployment deleted while the worker's scrape stores a sample of it is deleted whole, and the delete
answers 204 (PostgreSQL, where the two run at once). The sample is stored by another connection, as the
worker's would be, at the worst moment: after the delete has removed the samples and replicas it found and
before it removes the deployment row. Unlocked, that sample made the delete's commit fail (a 500)."""

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, connection, connections
from django.db.models.signals import post_delete
from django.test import Client

from console.catalog.models import ModelSource
from console.deployments.models import Deployment, Replica
from console.observability.models import MetricSample
from tests.test_console import smollm2

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["smollm2"]


def store_sample(deployment_id: int, outcome: list[str]) -> None:
    """One sample of the deployment, on this thread's own connection, waiting at most 1 s for a lock."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '1s'")
        MetricSample.objects.create(deployment_id=deployment_id, at=datetime.now(UTC), values={"v": {}})
        outcome.append("stored")
    except DatabaseError as exc:
        outcome.append(type(exc).__name__)
    finally:
        connections.close_all()


@pytest.fixture
def sample_mid_delete() -> Iterator[list[str]]:
    """While a delete runs: once its replicas are gone, a sample of their deployment is stored from another
    connection. Yields what became of that sample."""
    outcome: list[str] = []

    def replica_deleted(sender: type, instance: Replica, **kwargs: object) -> None:
        if not outcome:
            writer = threading.Thread(target=store_sample, args=(instance.deployment_id, outcome))
            writer.start()
            writer.join()

    post_delete.connect(replica_deleted, sender=Replica, dispatch_uid="sample-mid-delete")
    yield outcome
    post_delete.disconnect(sender=Replica, dispatch_uid="sample-mid-delete")


def test_a_sample_stored_while_its_deployment_is_deleted_waits_and_the_delete_succeeds(
    admin: Client, smollm2: ModelSource, sample_mid_delete: list[str]
) -> None:
    if connection.vendor != "postgresql":
        pytest.fail("needs PostgreSQL (the suite's DATABASE_URL): SQLite runs one writer at a time")
    dep = admin.post(
        "/api/deployments",
        {"name": "smol", "model": smollm2.name, "max_model_len": 2048},
        content_type="application/json",
    ).json()
    Deployment.objects.filter(pk=dep["id"]).update(state="stopped")
    Replica.objects.create(deployment_id=dep["id"], runtime="process", host="127.0.0.1", port=18999)
    resp = admin.delete(f"/api/deployments/{dep['id']}")
    assert resp.status_code == 204, resp.content
    assert sample_mid_delete == ["OperationalError"]  # it waited for the delete: lock_timeout
    assert not Deployment.objects.exists() and not Replica.objects.exists() and not MetricSample.objects.exists()
