"""The Batches page against a real batch (issue 30): sent with the openai SDK to a simulator deployment behind a web
server and a worker (tests/test_batch_api.py's box), it shows on /batch-jobs/ through the real ASGI entry point (not
the gateway's answer to a base URL without /v1) with its measured rate and ETA, is cancelled from the page, and the
runner ends it cancelled with its finished lines in the output file the page serves."""

import re

import pytest

from console.audit.models import AuditEntry
from tests.test_batch_api import Llama, box, llama, slow_batch_under_way, wait_batch  # noqa: F401 - box, llama: fixtures

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]


def test_a_running_batch_on_the_page_cancelled_from_it_keeps_its_finished_lines(llama: Llama) -> None:  # noqa: F811
    client = llama.openai()
    batch = slow_batch_under_way(client, "slow", 3)
    console = llama.client  # the admin, signed in to the console
    table = console.get("/batch-jobs/table/")
    assert table.status_code == 200 and "text/html" in table.headers["content-type"]
    row = table.text.split(f'data-batch="{batch.id}"')[1].split("</tr>")[0]
    assert "in_progress" in row and "lines/min" in row and ("about " in row or "under a minute" in row), row
    page = console.get("/batch-jobs/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, "no Cancel form on the page"
    answer = console.post(f"/batch-jobs/{batch.id}/cancel/", data={"csrfmiddlewaretoken": token[1], "next": "list"})
    assert answer.status_code == 302 and answer.headers["location"] == "/batch-jobs/"
    done = wait_batch(client, batch.id, {"cancelled", "completed"}, within=60)
    assert done.status == "cancelled" and done.output_file_id
    download = console.get(f"/batch-jobs/{batch.id}/output.jsonl")
    assert download.headers["content-type"] == "application/jsonl"
    assert download.content == client.files.content(done.output_file_id).content
    assert 3 <= len(download.content.splitlines()) == done.request_counts.completed < 60
    [entry] = AuditEntry.objects.filter(action="batch.cancel", target_name=batch.id)
    assert (entry.actor_name, entry.changes["status"][0]) == ("admin", "in_progress")
