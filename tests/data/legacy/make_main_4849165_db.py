"""How tests/data/legacy/main-4849165.sqlite3 was made: run once at commit 4849165 (main before the console
was split into domain apps), from the repository root, with that commit's code:

    DEBUG=1 HEARTH_DATA_DIR=/tmp/legacy DATABASE_URL=sqlite:////tmp/legacy/main-4849165.sqlite3 \
        .venv/bin/python tests/data/legacy/make_main_4849165_db.py

It builds the database through that commit's own migrations and console functions (add_local_model,
create_deployment, create_key, revoke_key), adds the replicas and request logs a launch and the gateway
would have written, and prints the API keys it made. It imports modules that no longer exist: it is kept
as the record of how the file was made, not to be run again. tests/test_migrate_legacy.py reads the file.
"""

import json
import os
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

call_command("migrate", verbosity=0)

from console.models import Deployment, Replica  # noqa: E402
from gateway.models import RequestLog  # noqa: E402

from console import apikeys, services  # noqa: E402

folder = Path(os.environ["HEARTH_DATA_DIR"]) / "smol-checkpoint"
folder.mkdir(parents=True, exist_ok=True)
config = json.loads((Path(__file__).resolve().parents[1] / "smollm2-135m-config.json").read_text())
(folder / "config.json").write_text(json.dumps(config))
header = json.dumps({"w": {"dtype": "BF16", "shape": [2048], "data_offsets": [0, 4096]}}).encode()
(folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(4096))

admin = get_user_model().objects.create_superuser("admin", "", "admin-password-1")
model = services.add_local_model("smol", str(folder))
dep = services.create_deployment(name="smol", model=model, engine="simulator", max_model_len=2048)
Deployment.objects.filter(pk=dep.pk).update(state="ready", state_reason="Serving.", engine_version="0.32.0")
now = timezone.now()
for port in (18001, 18002):
    Replica.objects.create(
        deployment=dep,
        runtime="process",
        runtime_name=f"replica-{port}",
        handle="1",
        host="127.0.0.1",
        port=port,
        engine_api_key=f"engine-key-{port}",
        running=True,
        started_at=now,
        ready_at=now,
    )
stopped = services.create_deployment(name="smol-old", model=model, engine="vllm-cpu", max_model_len=1024)
limited, limited_key = apikeys.create_key(
    "ci-bot", admin, allowed_models=["smol"], max_tokens_cap=256, requests_per_minute=60, tokens_per_day=100_000
)
_, open_key = apikeys.create_key("alice", admin)
revoked, revoked_key = apikeys.create_key("old-laptop", admin)
apikeys.revoke_key(revoked)
for i in range(3):
    RequestLog.objects.create(
        api_key=limited,
        model="smol",
        surface="openai",
        endpoint="/v1/chat/completions",
        stream=True,
        status=200,
        finish_reason="stop",
        prompt_tokens=40 + i,
        completion_tokens=20,
        cached_tokens=0,
        ttft_seconds=0.1,
        duration_seconds=0.5,
    )
print(json.dumps({"limited": limited_key, "open": open_key, "revoked": revoked_key}))
