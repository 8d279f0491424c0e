"""Debian's Chromium under Playwright for the browser tests: where it is, the flags it runs with, and ``browser``, a
module-scoped fixture (a module imports it to have one Chromium for its tests)."""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling out, and this machine's network refuses it.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is not installed (apt-get install chromium); .ci/run installs it")
    # Playwright's sync API keeps an event loop in this thread; Django's test database work here stays
    # synchronous, which its async-safety check cannot tell (Django docs, "Async safety").
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
