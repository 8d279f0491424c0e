"""The console in headless Chromium (Debian's chromium, driven by Playwright): first run, and the demo walk."""

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from django.conf import settings
from playwright.sync_api import Browser, Page, expect

from tests.chromium import browser  # noqa: F401 - the module's Chromium

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SMOLLM2 = settings.HEARTH_CACHE_DIR / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture
def page(browser: Browser, web: str) -> Iterator[Page]:  # noqa: F811 - the fixture
    context = browser.new_context(base_url=web)
    page = context.new_page()
    yield page
    context.close()


def test_first_run_to_a_planned_deployment_and_a_key(page: Page, tmp_path: Path) -> None:
    page.goto("/")
    expect(page.get_by_role("heading", name="Welcome to Hearth")).to_be_visible()
    page.get_by_label("Username").fill("admin")
    page.locator("#id_password").fill("admin-password-1")  # "Password" alone would match "Password (again)" too
    page.locator("#id_password2").fill("admin-password-1")
    page.get_by_role("button", name="Create admin").click()
    expect(page.get_by_role("heading", name="Models")).to_be_visible()
    expect(page.locator("[data-field=inventory]")).to_contain_text("GPUs:")

    page.locator("#id_local-name").fill("smollm2-135m")
    page.locator("#id_local-path").fill("/no/such/folder")
    page.get_by_role("button", name="Add model").first.click()
    expect(page.locator(".errorlist")).to_contain_text("is not a folder")
    page.locator("#id_local-path").fill(str(SMOLLM2))
    page.get_by_role("button", name="Add model").first.click()
    expect(page.get_by_text("Added smollm2-135m.")).to_be_visible()

    page.get_by_role("link", name="Deployments").click()
    page.locator("#id_name").fill("smol")
    page.locator("#id_model").select_option(label="smollm2-135m")
    page.locator("#id_engine").select_option("vllm-cpu")
    for gpu_only in ("kv_cache_dtype", "gpu_memory_utilization", "tensor_parallel_size", "max_num_seqs"):
        expect(page.locator(f"#id_{gpu_only}")).to_be_hidden()  # vLLM (CPU) is sized by its KV space alone
    page.locator("#id_max_model_len").fill("2048")
    page.locator("#id_kv_space_gib").fill("1")
    page.locator("#id_kv_space_gib").dispatch_event("change")  # htmx previews the plan on change
    expect(page.locator("[data-field=kv_bytes_per_token]")).to_have_text("23,040")
    expect(page.locator("[data-field=kv_capacity_tokens]")).to_have_text("46,592")
    page.screenshot(path=str(tmp_path / "plan.png"))
    page.get_by_role("button", name="Create deployment").click()
    expect(page.locator("[data-field=state]")).to_have_text("not launched yet")
    expect(page.get_by_role("button", name="Launch")).to_be_visible()

    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name").fill("alice laptop")
    page.get_by_role("button", name="Create key").click()
    key = page.locator("[data-field=new_key]").inner_text()
    assert key.startswith("hk-")
    page.reload()
    expect(page.locator("[data-field=new_key]")).to_have_count(0)
    expect(page.get_by_role("cell", name="alice laptop")).to_be_visible()


def test_the_demo_plan_on_a_simulated_8xh100_launch_key_and_stream(
    page: Page, worker: object, admin_user: object
) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("[data-field=inventory]")).to_contain_text(
        "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated"
    )

    page.goto("/models/")
    page.locator("#id_local-name").fill("smollm2")
    page.locator("#id_local-path").fill(str(SMOLLM2))
    page.get_by_role("button", name="Add model").first.click()

    page.goto("/deployments/")
    page.locator("#id_name").fill("demo")
    page.locator("#id_model").select_option(label="smollm2")
    page.locator("#id_engine").select_option("simulator")
    expect(page.locator("#id_kv_space_gib")).to_be_hidden()  # the simulator is planned on the GPUs
    expect(page.locator("#id_tensor_parallel_size")).to_be_visible()
    page.locator("#id_max_model_len").fill("8192")
    page.locator("#id_max_model_len").dispatch_event("change")
    expect(page.locator("[data-field=inventory]").last).to_contain_text("simulated (8xH100-80GB)")
    expect(page.locator(".membar .kv")).to_be_visible()
    expect(page.get_by_text("Tensor parallel 1 on 1 GPU")).to_be_visible()
    page.get_by_role("button", name="Create deployment").click()
    page.get_by_role("button", name="Launch").click()
    expect(page.locator("[data-field=state]")).to_have_text("ready", timeout=60_000)  # the panel refreshes itself

    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name").fill("demo")
    page.get_by_role("button", name="Create key").click()
    key = page.locator("[data-field=new_key]").inner_text()
    sdk = openai.OpenAI(base_url=page.url.split("/keys/")[0] + "/v1", api_key=key, max_retries=0)
    text = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in sdk.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "Hello"}], max_tokens=16, stream=True
        )
        if chunk.choices
    )
    assert text.strip()

    page.get_by_role("link", name="Deployments").click()
    page.get_by_role("link", name="demo").click()
    expect(page.locator("[data-field=generation_tokens_total]")).not_to_have_text("no data", timeout=15_000)
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Stop").click()  # a destructive button asks first
    expect(page.locator("[data-field=state]")).not_to_have_text("ready", timeout=30_000)
    assert asked and asked[0].startswith("Stop demo?"), asked
    expect(page.locator("[data-field=state]")).to_have_text("stopped", timeout=30_000)


def test_one_click_from_the_demo_catalog_to_a_70b_plan_on_the_simulated_box(
    page: Page, admin_user: object, tmp_path: Path
) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("navigation").get_by_role("link", name="Models").click()
    row = page.locator("tr[data-demo='llama-3.1-70b']")
    expect(row).to_contain_text("meta-llama/Meta-Llama-3.1-70B")
    expect(row).to_contain_text("131.4 GiB")
    page.screenshot(path=str(tmp_path / "demo-catalog.png"), full_page=True)
    row.get_by_role("button", name="Plan on this box").click()
    expect(page.locator("#id_name")).to_have_value("llama-3.1-70b")
    expect(page.locator("[data-field=kv_bytes_per_token]")).to_have_text("327,680")  # the plan loads by itself
    expect(page.locator("#plan")).to_contain_text("Fits.")
    expect(page.locator("#plan")).to_contain_text("8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated")
    expect(page.locator("#plan")).to_contain_text("131,072 tokens")  # the model's own context
    expect(page.locator("#plan")).to_contain_text("4 (GPUs 0, 1, 2, 3)")
    page.screenshot(path=str(tmp_path / "demo-plan.png"), full_page=True)
