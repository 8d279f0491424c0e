"""The Models page's add forms show every mistake at once, each under its field, with the values typed kept, and
save nothing (before, the first mistake the catalog found was shown alone, above the form)."""

import html
import re
from pathlib import Path

import pytest
from django.test import Client

from console.catalog.models import ModelSource
from tests.test_console import SMOLLM2_CONFIG

pytestmark = pytest.mark.django_db
BAD_NAME = "Model name 'bad name!' must start with a letter or digit and use only letters, digits, '.', '-' or '_'."


def field_errors(page: str, field: str) -> list[str]:
    """The errors Django renders for the form field ``field`` (its prefixed name, e.g. local-name): the list whose
    id the field's aria-describedby names, just before the field."""
    found = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', page, re.S)
    if not found:
        return []
    assert f'aria-describedby="id_{field}_helptext id_{field}_error"' in page, f"{field} is not tied to its errors"
    return [html.unescape(li) for li in re.findall(r"<li>(.*?)</li>", found.group(1))]


def typed_value(page: str, field: str) -> str:
    found = re.search(rf'<input type="text" name="{field}" value="([^"]*)"', page)
    assert found, f"no {field} input"
    return html.unescape(found.group(1))


def test_it_shows_a_bad_name_and_a_relative_path_at_once_and_keeps_them(admin: Client) -> None:
    resp = admin.post("/models/", {"local-name": "bad name!", "local-path": "relative/path"})
    page = resp.text
    assert resp.status_code == 200
    assert field_errors(page, "local-name") == [BAD_NAME]
    assert field_errors(page, "local-path") == ["Model path 'relative/path' must be an absolute path on the appliance."]
    assert (typed_value(page, "local-name"), typed_value(page, "local-path")) == ("bad name!", "relative/path")
    assert '<ul class="errorlist nonfield">' not in page  # nothing left above the form
    assert not ModelSource.objects.exists()


def test_it_shows_a_taken_name_and_a_folder_with_no_config_at_once(admin: Client, tmp_path: Path) -> None:
    ModelSource.objects.create(name="smol", kind="local", path="/m", config=SMOLLM2_CONFIG, weights_bytes=1)
    page = admin.post("/models/", {"local-name": " smol ", "local-path": str(tmp_path)}).text
    assert field_errors(page, "local-name") == ["A model named 'smol' already exists."]
    assert field_errors(page, "local-path") == [f"{tmp_path} has no config.json"]
    assert typed_value(page, "local-path") == str(tmp_path)
    assert list(ModelSource.objects.values_list("path", flat=True)) == ["/m"]


def test_it_shows_a_bad_name_and_a_malformed_repo_id_at_once_and_keeps_them(admin: Client) -> None:
    form = {"hf-name": "bad name!", "hf-repo_id": "not a repo!", "hf-revision": "v1"}
    page = admin.post("/models/", form).text
    assert field_errors(page, "hf-name") == [BAD_NAME]
    [repo_error] = field_errors(page, "hf-repo_id")  # the hub client refuses it before any request is sent
    assert repo_error.startswith("Could not read not a repo!@v1 from Hugging Face: Repo id must use alphanumeric")
    assert field_errors(page, "hf-revision") == []
    kept = [typed_value(page, f"hf-{f}") for f in ("name", "repo_id", "revision")]
    assert kept == ["bad name!", "not a repo!", "v1"]
    assert not ModelSource.objects.exists()
