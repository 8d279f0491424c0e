"""A deployment has one SLO: set on its page, its Capacity page shows and checks at it; set on the Capacity
page (or its API), the deployment page's panels measure goodput at it. With none set, the Capacity page says
its checks measure at the default, and the panels show no goodput."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from console.deployments.models import Deployment
from console.observability.outcomes import Slo
from console.observability.request_stats import slos
from console.observability.service_level import CHECK_DEFAULT, check_slo, out_of_range, slo_of

pytestmark = pytest.mark.django_db
JSON = "application/json"


def test_one_slo_is_shown_and_set_on_both_pages(admin: Client) -> None:
    assert admin.post("/api/models", {"demo": "qwen3-8b"}, content_type=JSON).status_code == 201
    dep = admin.post(
        "/api/deployments", {"name": "q", "model": "qwen3-8b", "engine": "simulator"}, content_type=JSON
    ).json()
    row = Deployment.objects.get(pk=dep["id"])
    capacity = f"/deployments/{dep['id']}/capacity/"
    assert slo_of(row) is None and check_slo(row) == (CHECK_DEFAULT, False)
    page = admin.get(capacity).text
    assert "No SLO set: checks measure goodput at TTFT ≤ 2.0 s, ITL ≤ 0.1 s." in page
    assert (
        'placeholder="2.0"' in page and "Empty: the default, 2.0 s." in page and 'value="2.0"' not in page
    )  # not offered as if chosen
    admin.post(f"/deployments/{dep['id']}/slo/", {"ttft_seconds": "1.5", "itl_seconds": ""})
    page = admin.get(capacity).text
    assert "SLO (the deployment's, its panels' too): TTFT ≤ 1.5 s, ITL not checked." in page
    before = slo_of(row)
    for page in (f"/deployments/{dep['id']}/slo/", f"{capacity}slo/"):  # one SLO, one range on both pages
        admin.post(page, {"ttft_seconds": "1", "itl_seconds": "100"})
        assert slo_of(row) == before, page
    refused = admin.post(f"/deployments/{dep['id']}/slo/", {"ttft_seconds": "nan", "itl_seconds": "inf"}, follow=True)
    said = "The SLO was not saved: TTFT target (s): Enter a number.; ITL target (s): Enter a number."
    assert said in refused.content.decode() and slo_of(row) == before  # each field named, not "Enter a number." twice
    admin.post(f"{capacity}slo/", {"ttft_seconds": "3", "itl_seconds": "0.2"})
    slo = slo_of(row)
    assert slo is not None and (slo.ttft_seconds, slo.itl_seconds) == (3.0, 0.2)
    assert slos([row]) == {row.pk: Slo(3.0, 0.2)}  # what the panels and the dashboard measure goodput at


def test_the_slo_api_takes_numbers_in_range_and_refuses_booleans_and_strings(admin: Client) -> None:
    assert admin.post("/api/models", {"demo": "qwen3-8b"}, content_type=JSON).status_code == 201
    dep = admin.post(
        "/api/deployments", {"name": "q", "model": "qwen3-8b", "engine": "simulator"}, content_type=JSON
    ).json()
    row, url = Deployment.objects.get(pk=dep["id"]), f"/api/deployments/{dep['id']}/slo"
    for ttft, itl in ((3, 1), (3600, 60.0), (0.25, 0.05)):  # ints and floats, up to the range's ends
        answer = admin.post(url, {"ttft_seconds": ttft, "itl_seconds": itl}, content_type=JSON)
        assert answer.status_code == 200 and answer.json() == {"ttft_seconds": ttft, "itl_seconds": itl}
        assert slo_of(row) == Slo(ttft, itl)
    spoiled = (("ttft_seconds", True), ("itl_seconds", False), ("ttft_seconds", "1.5"), ("itl_seconds", "0.1"))
    for field, value in spoiled:
        body = {"ttft_seconds": 1.5, "itl_seconds": 0.1} | {field: value}
        answer = admin.post(url, body, content_type=JSON)
        assert answer.status_code == 400 and field in answer.json()["detail"], (body, answer.content)
        assert slo_of(row) == Slo(0.25, 0.05), body  # nothing stored
    answer = admin.post(url, {"ttft_seconds": 2, "itl_seconds": None}, content_type=JSON)  # ITL not checked
    assert answer.status_code == 200 and slo_of(row) == Slo(2, None)
    answer = admin.post(url, {"ttft_seconds": 0.25}, content_type=JSON)  # left out is not null: a 400
    assert answer.status_code == 400 and "itl_seconds" in answer.json()["detail"] and slo_of(row) == Slo(2, None)
    admin.post(url, {"ttft_seconds": 0.25, "itl_seconds": 0.05}, content_type=JSON)
    for ttft, itl in ((0, 0.1), (3601, 0.1), (1, 60.5)):
        answer = admin.post(url, {"ttft_seconds": ttft, "itl_seconds": itl}, content_type=JSON)
        assert answer.json() == {"detail": out_of_range(ttft, itl)}
        assert answer.status_code == 400 and slo_of(row) == Slo(0.25, 0.05)


def test_the_deployment_api_shows_its_slo_and_the_list_reads_them_in_its_one_query(admin: Client) -> None:
    assert admin.post("/api/models", {"demo": "qwen3-8b"}, content_type=JSON).status_code == 201
    ids = [
        admin.post(
            "/api/deployments", {"name": name, "model": "qwen3-8b", "engine": "simulator"}, content_type=JSON
        ).json()["id"]
        for name in ("a", "b", "c")
    ]
    none_set = {"ttft_seconds": None, "itl_seconds": None, "default": True}
    assert admin.get(f"/api/deployments/{ids[0]}").json()["slo"] == none_set
    admin.post(f"/api/deployments/{ids[0]}/slo", {"ttft_seconds": 3, "itl_seconds": 0.2}, content_type=JSON)
    admin.post(f"/deployments/{ids[1]}/slo/", {"ttft_seconds": "1.5", "itl_seconds": ""})  # the page: ITL not checked
    assert admin.get(f"/api/deployments/{ids[0]}").json()["slo"] == {
        "ttft_seconds": 3.0,
        "itl_seconds": 0.2,
        "default": False,
    }
    with CaptureQueriesContext(connection) as queries:
        listed = admin.get("/api/deployments").json()
    assert [d["slo"] for d in listed] == [
        {"ttft_seconds": 3.0, "itl_seconds": 0.2, "default": False},
        {"ttft_seconds": 1.5, "itl_seconds": None, "default": False},
        none_set,
    ]
    assert len([q for q in queries.captured_queries if "servicelevel" in q["sql"]]) == 1  # not one per deployment
