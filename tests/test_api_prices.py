"""The Costs page's prices under /api: GPU prices and each deployment's price per million tokens, read by everyone,
set by admins with the page's rules and words (a negative price, an output price without an input price: a 400
naming the field, nothing written) and its audit entries; a member's write is a 403 in the API's shape."""

from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import Client

from console.audit.models import AuditEntry
from console.deployments.models import Deployment
from console.observability import cost, pricing
from console.observability.models import DeploymentPrice, PriceSetting
from tests.test_panels import H100_BOX, deployment

pytestmark = pytest.mark.django_db
H100 = H100_BOX.split("× ", 1)[1].split(" (", 1)[0]  # the GPU model the inventory names


@pytest.fixture
def priced() -> Deployment:
    """The one-GPU H100 deployment "llama", its GPU priced at $2/hour."""
    PriceSetting.objects.all().delete()
    PriceSetting.objects.create(gpu_model=H100, usd_per_gpu_hour=Decimal("2"), source="test")
    return deployment()


@pytest.fixture
def member_client(client: Client, member: Any) -> Client:
    client.force_login(member)
    return client


def put(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.put(url, body, content_type="application/json")


def published(dep: Deployment) -> str | None:
    value = redis.Redis.from_url(settings.REDIS_URL).get(cost.price_per_token(dep.pk))
    return None if value is None else value.decode()


def test_it_lists_the_gpu_prices_with_their_source(member_client: Client, priced: Deployment) -> None:
    rows = member_client.get("/api/gpu-prices").json()
    assert [(r["gpu_model"], Decimal(r["usd_per_gpu_hour"]), r["source"]) for r in rows] == [(H100, 2, "test")]


def test_an_admin_sets_a_new_gpu_price_and_updates_a_listed_one_each_audited(admin: Client, priced: Deployment) -> None:
    made = admin.post(
        "/api/gpu-prices", {"gpu_model": "NVIDIA L4", "usd_per_gpu_hour": 0.8, "source": "quote"}, "application/json"
    )
    assert made.status_code == 200, made.content
    assert (made.json()["gpu_model"], Decimal(made.json()["usd_per_gpu_hour"])) == ("NVIDIA L4", Decimal("0.8"))
    updated = admin.post("/api/gpu-prices", {"gpu_model": H100, "usd_per_gpu_hour": "3.25"}, "application/json")
    assert updated.status_code == 200 and PriceSetting.objects.count() == 2
    assert PriceSetting.objects.get(gpu_model=H100).usd_per_gpu_hour == Decimal("3.25")
    entries = AuditEntry.objects.filter(action="price.set").order_by("pk")
    assert [(e.actor_name, e.target_name) for e in entries] == [
        ("admin", "NVIDIA L4: $0.8/GPU-hour"),
        ("admin", f"{H100}: $3.25/GPU-hour"),
    ]
    assert entries[1].changes == {"usd_per_gpu_hour": ["2.0000", "3.25"], "source": ["test", ""]}
    again = admin.post("/api/gpu-prices", {"gpu_model": H100, "usd_per_gpu_hour": "3.25"}, "application/json")
    assert again.status_code == 200 and entries.count() == 2  # the same price again: nothing changed to audit


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"gpu_model": "NVIDIA L4", "usd_per_gpu_hour": -1}, "usd_per_gpu_hour: A price cannot be negative."),
        ({"gpu_model": "NVIDIA L4", "usd_per_gpu_hour": "0.12345"}, "usd_per_gpu_hour: Ensure that there are no more"),
        ({"gpu_model": "", "usd_per_gpu_hour": 1}, "gpu_model: This field is required."),
        ({"gpu_model": "x" * 101, "usd_per_gpu_hour": 1}, "gpu_model: Ensure this value has at most 100 characters"),
        ({"gpu_model": "NVIDIA L4"}, "usd_per_gpu_hour: Field required"),
    ],
)
def test_a_bad_gpu_price_is_a_400_naming_the_field_and_writes_nothing(
    admin: Client, priced: Deployment, body: dict[str, Any], said: str
) -> None:
    resp = admin.post("/api/gpu-prices", body, "application/json")
    assert resp.status_code == 400 and resp.json()["detail"].startswith(said), resp.content
    assert list(PriceSetting.objects.values_list("gpu_model", flat=True)) == [H100]
    assert not AuditEntry.objects.filter(action="price.set").exists()


def test_a_members_price_writes_are_403_in_the_apis_shape(member_client: Client, priced: Deployment) -> None:
    gpu = member_client.post("/api/gpu-prices", {"gpu_model": H100, "usd_per_gpu_hour": 0}, "application/json")
    dep = put(member_client, f"/api/deployments/{priced.pk}/price", {"usd_per_million_input": 0})
    for resp in (gpu, dep):
        assert resp.status_code == 403 and resp.json() == {"detail": "This is for admins; you are a member."}
    assert PriceSetting.objects.get().usd_per_gpu_hour == 2 and not DeploymentPrice.objects.exists()


def test_each_deployments_price_is_what_the_costs_page_shows(member_client: Client, priced: Deployment) -> None:
    rows = member_client.get("/api/deployment-prices").json()
    assert len(rows) == 1
    row = rows[0]
    assert (row["id"], row["name"], row["gpus"], row["gpu_model"]) == (priced.pk, "llama", 1, H100)
    assert Decimal(row["usd_per_hour"]) == 2 and row["hourly_reason"] == ""
    charged = pricing.charged_price(priced)
    assert (row["source"], row["words"], row["usd_per_million_input"]) == (charged.source, charged.words, None)
    assert row["words"] in member_client.get("/costs/").text


def test_an_admin_sets_a_deployments_price_publishes_it_and_puts_it_back_to_capacity(
    admin: Client, priced: Deployment
) -> None:
    url = f"/api/deployments/{priced.pk}/price"
    resp = put(admin, url, {"usd_per_million_input": "0.5", "usd_per_million_output": 1.5})
    assert resp.status_code == 200, resp.content
    row = resp.json()
    assert (row["source"], Decimal(row["usd_per_million_input"]), Decimal(row["usd_per_million_output"])) == (
        "admin",
        Decimal("0.5"),
        Decimal("1.5"),
    )
    assert published(priced) == "0.0000005,0.0000015"
    same = put(admin, url, {"usd_per_million_input": 0.8}).json()  # output left out: the input price
    assert (Decimal(same["usd_per_million_input"]), Decimal(same["usd_per_million_output"])) == (Decimal("0.8"),) * 2
    assert put(admin, url, {"usd_per_million_input": "0.80"}).status_code == 200  # the same price: not audited
    back = put(admin, url, {"usd_per_million_input": None, "usd_per_million_output": None}).json()
    assert back["source"] != "admin"
    put(admin, url, {"usd_per_million_input": None, "usd_per_million_output": None})  # back again: not audited
    entries = AuditEntry.objects.filter(action="deployment.price").order_by("pk")
    assert [e.changes for e in entries] == [
        {"usd_per_million_input": "0.5", "usd_per_million_output": "1.5"},
        {"usd_per_million_input": "0.8", "usd_per_million_output": "0.8"},
        {"from": "capacity"},
    ]
    assert {e.actor_name for e in entries} == {"admin"} and entries[0].target_id == str(priced.pk)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"usd_per_million_input": -1}, "usd_per_million_input: Ensure this value is greater than or equal to 0."),
        (
            {"usd_per_million_input": 1, "usd_per_million_output": "-0.5"},
            "usd_per_million_output: Ensure this value is greater than or equal to 0.",
        ),
        (
            {"usd_per_million_input": None, "usd_per_million_output": 2},
            "usd_per_million_input: Give the input price too (or neither, for the price from capacity).",
        ),
        ({"usd_per_million_output": 2}, "usd_per_million_input: Field required"),
        ({"usd_per_million_input": "lots"}, "usd_per_million_input: Input should be"),
        ({"usd_per_million_input": 1, "usd_per_million_ouput": 2}, "usd_per_million_ouput: Extra inputs"),
    ],
)
def test_a_bad_deployment_price_is_a_400_naming_the_field_and_writes_nothing(
    admin: Client, priced: Deployment, body: dict[str, Any], said: str
) -> None:
    resp = put(admin, f"/api/deployments/{priced.pk}/price", body)
    assert resp.status_code == 400 and resp.json()["detail"].startswith(said), resp.content
    assert not DeploymentPrice.objects.exists() and published(priced) is None
    assert not AuditEntry.objects.filter(action="deployment.price").exists()


def test_the_price_of_a_deployment_not_there_is_a_404_naming_it(admin: Client) -> None:
    resp = put(admin, "/api/deployments/99999/price", {"usd_per_million_input": 1})
    assert resp.status_code == 404 and resp.json() == {
        "detail": "No deployment with the id in /api/deployments/99999/price."
    }
