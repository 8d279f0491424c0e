"""Weights before launch (issue 34 part 4): a Hugging Face model's files downloaded by the launch into the weights
cache, from a stand-in hub (tests/standin_hub.py) that HF_ENDPOINT names, by the launch's own code in a child
process (the body of the Celery launch task, console.deployments.launching): the progress shows on the deployment's
page and in its JSON while the download runs, a download killed mid-file resumes with only the missing bytes, and a
corrupt file is caught, fetched again, and reported when it stays corrupt.
"""

import time
from pathlib import Path

import pytest
from django.test import Client

from console.deployments.models import Deployment
from tests.standin_hub import RepoFile, standin_hub
from tests.weightsworld import (
    CHUNK,
    COMMIT,
    CONFIG,
    HOLD_AT,
    REPO,
    WEIGHTS,
    blobs,
    deployment,
    files,
    finished,
    launch_env,
    run,
    shown_download,
)

pytestmark = pytest.mark.django_db(transaction=True)  # the child process reads the rows this test writes


def test_a_download_shows_its_progress_survives_a_kill_and_resumes(
    live_env: dict[str, str], admin: Client, tmp_path: Path
) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        hub.hold_after["model.safetensors"] = HOLD_AT
        env = launch_env(live_env, hub, tmp_path)
        first = run(env, tmp_path / "launch.log", "launch", dep_id)
        assert hub.held.wait(60), first.output()[-3000:]
        partial = blobs(tmp_path) / f"{RepoFile('w', WEIGHTS, lfs=True).sha256}.hearth-partial"
        answer = shown_download(admin, dep_id, first)
        shown = answer["weights_download"]
        assert (
            answer["state"] == "pulling"
            and shown["repo"] == REPO
            and shown["total_bytes"] == len(CONFIG) + len(WEIGHTS)
        )
        assert 0 < shown["fraction"] < 1 and shown["file"] == "model.safetensors"
        assert answer["state_reason"].startswith(f"Downloading the weights of {REPO}: "), answer["state_reason"]
        page = admin.get(f"/deployments/{dep_id}/").content.decode()
        assert 'data-field="weights-download"' in page and f'max="{len(CONFIG) + len(WEIGHTS)}"' in page
        assert "Downloading the weights of" in page

        first.crash()  # SIGKILL mid-file, as a worker killed by the OOM killer or a reboot
        on_disk = partial.stat().st_size
        assert on_disk == CHUNK  # what http_get had written when it was killed
        hub.release.set()

        second = run(env, tmp_path / "resume.log", "resume", dep_id)  # reconcile's resume_launch, from pulling
        finished(second)
        assert hub.ranges == [("model.safetensors", f"bytes={on_disk}-")]  # asked only for what was missing
        # the killed transfer (what it wrote after the kill went to a closed socket), then only the missing bytes
        assert hub.sent("model.safetensors")[1:] == [(on_disk, len(WEIGHTS) - on_disk)]
        dep = Deployment.objects.get(pk=dep_id)
    snapshot = tmp_path / "weights" / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
    assert (snapshot / "model.safetensors").read_bytes() == WEIGHTS
    assert (snapshot / "config.json").read_bytes() == CONFIG
    assert not partial.exists()
    assert dep.state == "failed" and "could not start" in dep.state_reason, dep.state_reason  # the engine, after
    assert admin.get(f"/api/deployments/{dep_id}").json()["weights_download"] is None


def test_a_file_corrupt_on_disk_is_caught_and_fetched_again(
    live_env: dict[str, str], admin: Client, tmp_path: Path
) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        hub.hold_after["model.safetensors"] = HOLD_AT
        env = launch_env(live_env, hub, tmp_path)
        first = run(env, tmp_path / "launch.log", "launch", dep_id)
        assert hub.held.wait(60), first.output()[-3000:]
        shown_download(admin, dep_id, first)  # its first 10 MiB written
        first.crash()
        partial = next(blobs(tmp_path).glob("*.hearth-partial"))
        with partial.open("r+b") as f:  # a bit flipped in what was on disk before the resume
            first_byte = f.read(1)
            f.seek(0)
            f.write(bytes([first_byte[0] ^ 0x01]))
        hub.release.set()
        output = finished(run(env, tmp_path / "resume.log", "resume", dep_id))
        assert "model.safetensors of hearth-test/tiny-llama is corrupt (its sha256 is" in output
        # the missing bytes, then (the whole file failing its sha256) the whole file afresh, without a Range
        assert hub.ranges == [("model.safetensors", f"bytes={CHUNK}-")]
        assert hub.sent("model.safetensors")[1:] == [(CHUNK, len(WEIGHTS) - CHUNK), (0, len(WEIGHTS))]
    snapshot = blobs(tmp_path).parent / "snapshots" / COMMIT
    assert (snapshot / "model.safetensors").read_bytes() == WEIGHTS
    assert "could not start" in Deployment.objects.get(pk=dep_id).state_reason


def test_a_file_the_hub_serves_corrupt_fails_the_launch_saying_which(live_env: dict[str, str], tmp_path: Path) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        hub.corrupt.add("model.safetensors")
        finished(run(launch_env(live_env, hub, tmp_path), tmp_path / "launch.log", "launch", dep_id))
        assert hub.sent("model.safetensors") == [(0, len(WEIGHTS))] * 2  # fetched, found corrupt, fetched again
    dep = Deployment.objects.get(pk=dep_id)
    assert dep.state == "failed"
    assert dep.state_reason.startswith("model.safetensors of hearth-test/tiny-llama is corrupt (its sha256 is ")
    assert "still not the hub's" in dep.state_reason
    assert not list(blobs(tmp_path).glob("*.hearth-partial"))
    assert not (blobs(tmp_path).parent / "snapshots" / COMMIT / "model.safetensors").exists()


def test_a_commit_downloaded_before_launches_again_with_the_hub_unreachable(
    live_env: dict[str, str], tmp_path: Path
) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        env = launch_env(live_env, hub, tmp_path)
        finished(run(env, tmp_path / "launch.log", "launch", dep_id))
    Deployment.objects.filter(pk=dep_id).update(state="pending")  # the hub is gone now: an offline box
    finished(run(env, tmp_path / "again.log", "launch", dep_id))
    assert "could not start" in Deployment.objects.get(pk=dep_id).state_reason  # past the weights, to the engine


def test_a_hub_that_fails_is_tried_again_after_a_backoff_the_page_names(
    live_env: dict[str, str], admin: Client, tmp_path: Path
) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        hub.unavailable["model.safetensors"] = 1
        proc = run(launch_env(live_env, hub, tmp_path), tmp_path / "launch.log", "launch", dep_id)
        deadline = time.monotonic() + 60
        while not ((shown := admin.get(f"/api/deployments/{dep_id}").json()["weights_download"]) or {}).get("retrying"):
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.output()[-3000:]
            time.sleep(0.2)
        assert shown["retrying"].startswith("Trying again in ") and "503" in shown["retrying"], shown
        assert shown["words"].endswith(shown["retrying"]) and shown["file"] == "model.safetensors"
        finished(proc)
        assert hub.unavailable["model.safetensors"] == 0 and hub.sent("model.safetensors") == [(0, len(WEIGHTS))]
    assert (blobs(tmp_path).parent / "snapshots" / COMMIT / "model.safetensors").read_bytes() == WEIGHTS


def test_a_download_the_disk_cannot_hold_is_refused_before_a_byte(live_env: dict[str, str], tmp_path: Path) -> None:
    dep_id = deployment()
    with standin_hub(REPO, COMMIT, files()) as hub:
        hub.claimed_size["model.safetensors"] = 2**60  # an exbibyte: no disk here has it free
        finished(run(launch_env(live_env, hub, tmp_path), tmp_path / "launch.log", "launch", dep_id))
        assert hub.transfers == []
    reason = Deployment.objects.get(pk=dep_id).state_reason
    assert reason.startswith(f"The weights of {REPO} need 1,048,576.0 TiB more on the weights cache's disk, which has ")
