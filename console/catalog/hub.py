"""Model facts from the Hugging Face Hub, without downloading weights (huggingface_hub).

The revision is pinned to its commit sha; config.json is fetched; weight bytes come from the
safetensors headers the hub serves (``HfApi.get_safetensors_metadata`` reads them by HTTP range).
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.parsers import template_text


class HubError(RuntimeError):
    """The hub could not be read; the message says what was asked and what went wrong."""


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str  # commit sha
    config: dict[str, Any]
    weights_bytes: int
    license: str
    tensor_dtypes: list[str]
    chat_template: str = ""  # the chat template's text, "" when the repo has none


def read_hub_model(repo_id: str, revision: str = "main") -> HubModel:
    """Read a repo at ``revision`` (branch, tag or sha). Raises HubError."""
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi()
    try:
        info = api.model_info(repo_id, revision=revision or "main")
        sha = info.sha or ""
        config = json.loads(Path(hf_hub_download(repo_id, "config.json", revision=sha)).read_text())
        weights = api.get_safetensors_metadata(repo_id, revision=sha)
    except Exception as exc:  # the hub client raises its own HTTP library's transport errors too
        raise HubError(f"Could not read {repo_id}@{revision or 'main'} from Hugging Face: {exc}") from None
    total = sum(
        int(t.data_offsets[1]) - int(t.data_offsets[0])
        for f in weights.files_metadata.values()
        for t in f.tensors.values()
    )
    license_ = getattr(info.card_data, "license", None) if info.card_data else None
    dtypes = sorted({str(t.dtype) for f in weights.files_metadata.values() for t in f.tensors.values()})
    files = {s.rfilename for s in info.siblings or []}
    return HubModel(repo_id, sha, config, total, str(license_ or ""), dtypes, _chat_template(repo_id, sha, files))


def _chat_template(repo_id: str, sha: str, files: set[str]) -> str:
    """The repo's chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s), read for the
    engine's tool-call and reasoning parsers (engines.parsers); "" when it has none or it cannot be read."""
    from huggingface_hub import hf_hub_download

    try:
        if "chat_template.jinja" in files:
            return Path(hf_hub_download(repo_id, "chat_template.jinja", revision=sha)).read_text(errors="replace")
        if "tokenizer_config.json" in files:
            raw = json.loads(Path(hf_hub_download(repo_id, "tokenizer_config.json", revision=sha)).read_text())
            return template_text(raw if isinstance(raw, dict) else None)
    except Exception:  # any failure: the parsers fall back to config.json alone; the model still adds
        return ""
    return ""
