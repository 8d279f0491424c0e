"""The weights cache page (issue 34 part 4): the models Hearth downloaded, with their size on disk and the
deployments that use them; the space of one no deployment needs is freed, one in use is kept."""

from pathlib import Path

import pytest
from django.test import Client

from console.audit.models import AuditEntry
from console.deployments.models import Deployment
from tests.standin_hub import standin_hub
from tests.weightsworld import COMMIT, CONFIG, REPO, WEIGHTS, blobs, deployment, files, finished, launch_env, run

pytestmark = pytest.mark.django_db(transaction=True)  # the child process reads the rows this test writes


def test_the_cache_page_lists_a_model_with_its_users_and_frees_it_once_none_needs_it(
    live_env: dict[str, str], admin: Client, tmp_path: Path, settings: object
) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        finished(run(launch_env(live_env, hub, tmp_path), tmp_path / "launch.log", "launch", dep_id))
    settings.HEARTH_WEIGHTS_DIR = tmp_path / "weights"  # type: ignore[attr-defined]
    (blobs(tmp_path) / "0123abcd.hearth-partial").write_bytes(b"x" * 1000)  # an interrupted download's bytes

    page = admin.get("/weights/").content.decode()
    assert f'<tr data-repo="{REPO}">' in page
    assert f"{(len(WEIGHTS) + len(CONFIG)) / 2**20:,.1f} MiB" in page and "+ 1,000 bytes partly downloaded" in page
    assert '<td data-field="used-by">tiny</td>' in page and 'data-action="free"' not in page

    admin.post("/weights/free/", {"repo_id": REPO})
    page = admin.get("/weights/").content.decode()
    assert "is used by tiny; delete those deployments first." in page and blobs(tmp_path).is_dir()

    Deployment.objects.filter(pk=dep_id).delete()
    assert 'data-action="free"' in admin.get("/weights/").content.decode()
    page = admin.post("/weights/free/", {"repo_id": REPO}, follow=True).content.decode()
    assert f"{REPO} is no longer in the weights cache." in page and "Nothing downloaded yet" in page
    assert not blobs(tmp_path).parent.exists()  # every revision gone, and the partial download with them
    assert not (tmp_path / "weights" / "complete" / blobs(tmp_path).parent.name / COMMIT).exists()  # launches fetch it
    entry = AuditEntry.objects.get(action="weights.free")
    assert entry.changes == {"revisions": [COMMIT], "bytes": len(WEIGHTS) + len(CONFIG)}


def test_the_cache_page_is_for_admins(client: Client, member: object) -> None:
    client.force_login(member)  # type: ignore[arg-type]
    member_client = client
    assert member_client.get("/weights/").status_code == 403
    assert member_client.post("/weights/free/", {"repo_id": REPO}).status_code == 403


def test_freeing_a_model_the_cache_does_not_hold_says_so(admin: Client, tmp_path: Path, settings: object) -> None:
    settings.HEARTH_WEIGHTS_DIR = tmp_path  # type: ignore[attr-defined]
    (tmp_path / "hub").mkdir()
    page = admin.post("/weights/free/", {"repo_id": "org/nothing"}, follow=True).content.decode()
    assert "The weights cache holds no model &#x27;org/nothing&#x27;." in page
