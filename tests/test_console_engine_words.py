"""How the console's pages name a deployment's engine and what it holds: the launch form's words for its kind
(vLLM (CPU), not vllm-cpu), and a CPU deployment's memory where a GPU one has GPUs."""

import re

import pytest
from django.test import Client

from tests.test_console_display import a_deployment

pytestmark = pytest.mark.django_db


def test_pages_name_a_deployment_s_engine_as_the_launch_form_does(admin: Client) -> None:
    dep = a_deployment("labelled", engine="vllm-cpu", gpus=0)
    for url in (f"/deployments/{dep.pk}/", "/deployments/", f"/deployments/{dep.pk}/change/"):
        page = admin.get(url).content.decode()
        assert "vLLM (CPU)" in page and ">vllm-cpu<" not in page and "on vllm-cpu" not in page, url


def test_a_cpu_deployment_s_recreate_and_plan_speak_of_memory_and_whole_numbers(admin: Client) -> None:
    dep = a_deployment("cpu-one", engine="vllm-cpu", gpus=0)
    page = admin.get(f"/deployments/{dep.pk}/change/").content.decode()
    form = dict(re.findall(r'name="([a-z_]+)" value="([^"]*)"', page))
    form |= {"kv_cache_dtype": "auto", "idle_policy": "stay", "sleep_level": "1", "max_model_len": "4096"}
    preview = admin.post(f"/deployments/{dep.pk}/change/", form).content.decode()
    assert 'data-field="recreate"' in preview, preview[:3000]
    assert "holds its share of this host's memory, so its engine stops" in preview and "GPUs, so" not in preview
    plan = admin.post(
        "/deployments/plan/",
        {"name": "p", "model": dep.model_id, "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1},
    ).content.decode()
    said = re.search(r"<dt>Max concurrency</dt><dd>([^<]*)</dd>", plan)
    assert said and re.fullmatch(r"[\d,]+(\.\d+)? full-length sequences?", said.group(1)), said
