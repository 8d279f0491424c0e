"""The Settings page in headless Chromium, from a real web server whose environment holds a secret of each kind (a
setting, a token, a client secret, compose's passwords, a password in DATABASE_URL, a token file) and whose log
holds them too: every setting the docs list is listed, the Content-Security-Policy refuses nothing, the support
bundle is copied whole and downloaded, and no secret value is in the page, the clipboard or the file. Issue 33,
point 4. Screenshots (the first screen, the whole page) go to the test's folder (and HEARTH_SCREENSHOTS, when set)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.conftest import start_web
from tests.test_browser_panels import keep
from tests.test_readme_settings import settings_table

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SECRETS = {
    "SECRET_KEY": "browser-settings-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "HEARTH_METRICS_TOKEN": "browser-metrics-token-4e1f",
    "HEARTH_OIDC_CLIENT_SECRET": "browser-oidc-secret-77a0",
    "POSTGRES_PASSWORD": "browser-postgres-password-2b9c",
    "GRAFANA_ADMIN_PASSWORD": "browser-grafana-password-d1e5",
}
DATABASE_PASSWORD = "browser-database-url-password-6f3d"  # PostgreSQL trusts this box: any password is taken
HF_TOKEN = "hf_browserTokenInTheFile90ab"


@pytest.fixture
def secret_web(live_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """A web server with every secret set, logging to ``HEARTH_DATA_DIR/logs/web.log`` as ``make up``'s does."""
    data = tmp_path / "data"
    (data / "logs").mkdir(parents=True)
    (tmp_path / "hf-token").write_text(HF_TOKEN + "\n")
    leaked = [*SECRETS.values(), DATABASE_PASSWORD, HF_TOKEN]
    (data / "logs" / "worker.log").write_text("".join(f"ERROR leaked {value} here\n" for value in leaked))
    env = {
        **live_env,
        **SECRETS,
        "HEARTH_DATA_DIR": str(data),
        "DATABASE_URL": live_env["DATABASE_URL"].replace("://postgres@", f"://postgres:{DATABASE_PASSWORD}@"),
        "HEARTH_OIDC_CLIENT_ID": "hearth-console",
        "HEARTH_HF_TOKEN_FILE": str(tmp_path / "hf-token"),
    }
    proc, base = start_web(env, data / "logs" / "web.log")
    yield base
    proc.stop()


def test_the_settings_page_lists_every_setting_and_no_secret(
    browser: Browser,  # noqa: F811 - the fixture
    secret_web: str,
    django_user_model: Any,
    tmp_path: Path,
) -> None:
    django_user_model.objects.create_superuser("admin", "", "admin-password-1")
    context = browser.new_context(base_url=secret_web, viewport={"width": 1280, "height": 800}, accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Settings", exact=True).click()
    expect(page.get_by_role("heading", name="Settings and about")).to_be_visible()
    expect(page.get_by_role("link", name="Settings", exact=True)).to_have_attribute("aria-current", "page")
    for name in settings_table():
        expect(page.locator(f"tr[data-setting={name}]")).to_have_count(1)
    expect(page.locator("tr[data-setting=HEARTH_OIDC_CLIENT_SECRET] td").nth(1)).to_have_text("set")
    expect(page.locator("tr[data-setting=DATABASE_URL] td").nth(1)).to_contain_text("postgres:***@")

    page.screenshot(path=str(tmp_path / "settings-top.png"))  # what a 1280×800 window shows first

    page.get_by_role("button", name="Copy bundle").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == (page.locator("#support-bundle").text_content() or "").strip()
    assert "## Configuration" in copied and "ERROR leaked *** here" in copied
    with page.expect_download() as download:
        page.get_by_role("link", name="Download it").click()
    downloaded = Path(download.value.path()).read_text()

    shot = tmp_path / "settings.png"
    page.screenshot(path=str(shot), full_page=True)
    keep(shot)
    keep(tmp_path / "settings-top.png")
    for text in (page.content(), copied, downloaded):
        assert [v for v in [*SECRETS.values(), DATABASE_PASSWORD, HF_TOKEN] if v in text] == []
    assert errors == []  # a Content-Security-Policy refusal is a console error
    context.close()
