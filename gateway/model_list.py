"""The model objects of ``GET /v1/models``: OpenAI's fields and Anthropic's (``type``, ``display_name``,
``created_at``; the list's ``has_more``, ``first_id``, ``last_id``: one shape both SDKs' ``models.list()`` read, as
the path is the same for both), and each model's context length and output limit under the names the clients that
read them look for.

What reads what (read in each client's source or shipped build, 2026-12-04):

- vLLM 0.32.0's own ``ModelCard`` (vllm/entrypoints/serve/engine/protocol.py) and SGLang 0.5.15.post1's
  (python/sglang/srt/entrypoints/openai/protocol.py) carry ``max_model_len``: the context, prompt and output
  together. Continue's ``vllm`` provider (core/llm/llms/Vllm.ts) takes its context length from the first model's
  ``max_model_len`` when its model is autodetected.
- OpenCode 1.18.33 reads ``/models`` only for providers it knows (its Modal provider: ``context_length`` and
  ``max_output_length`` become ``limit.context`` and ``limit.output``); a custom ``@ai-sdk/openai-compatible``
  provider takes ``limit`` from opencode.json alone (anomalyco/opencode#6231, #40908 ask for more). The same two
  names are served here, so a client that reads them, OpenRouter's ``context_length`` among them, finds them.
- Codex 0.169.0 fetches its model catalog (``{"models": [...]}`` with ``context_window``) only with a ChatGPT
  login or a provider ``auth`` command (codex-rs/models-manager/src/manager.rs ``should_refresh_models``); with an
  ``env_key`` provider it reads ``model_context_window`` from config.toml, never this list.
- Claude Code and Continue's ``cn`` 1.5.47 read no context length from the server (``cn``: the config's
  ``defaultCompletionOptions.contextLength``, else 200,000).
"""

from datetime import UTC, datetime

from gateway.snapshot import KeyEntry, Route, Snapshot


def model_list(snapshot: Snapshot, entry: KeyEntry) -> dict[str, object]:
    """The body of ``GET /v1/models`` for ``entry``'s key: every model it may use (``model_objects``), in one page."""
    data = model_objects(snapshot, entry)
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"object": "list", "data": data, "has_more": False, "first_id": first, "last_id": last}


def model_objects(snapshot: Snapshot, entry: KeyEntry) -> list[dict[str, object]]:
    """The models ``entry``'s key may use that are ready or put aside to share the GPUs (a request wakes them),
    each as model_object has it."""
    return [
        model_object(route, entry)
        for route in (*snapshot.routes.values(), *snapshot.asleep.values())
        if entry.allows(route.served_model_name)
    ]


def model_object(route: Route, entry: KeyEntry) -> dict[str, object]:
    """OpenAI's and Anthropic's model object for ``route`` (``created`` in Unix seconds, ``created_at`` the same in
    RFC 3339), with ``max_model_len`` and ``context_length`` (tokens of context,
    null when not known: an external engine that did not say) and ``max_output_length`` (the most tokens one
    request may generate through ``entry``'s key: the context, lowered to the key's or the deployment's cap)."""
    context = route.max_model_len or None
    caps = [c for c in (context, route.max_tokens_cap, entry.max_tokens_cap) if c is not None]
    return {
        "id": route.served_model_name,
        "object": "model",
        "created": route.created,
        "owned_by": "hearth",
        "type": "model",
        "display_name": route.served_model_name,
        "created_at": datetime.fromtimestamp(route.created, UTC).isoformat().replace("+00:00", "Z"),
        "max_model_len": context,
        "context_length": context,
        "max_output_length": min(caps) if caps else None,
    }
