"""A vLLM look-alike for demo mode and failure tests: ``python -m engines.simulator --port 8000 ...``.

Serves, at the protocol level as vLLM 0.32.0 does: ``/health``, ``/version``, ``/v1/models``,
``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/responses`` (streamed events,
tool calls, reasoning items: ``responses_api.py``), ``/v1/messages``, ``/v1/messages/count_tokens``,
``/tokenize`` and ``/metrics`` (flavors ``vllm``, ``vllm-v0``, ``sglang``).
Answers are deterministic words paced by a simulated scheduler with a KV budget, a FIFO queue and a
prefix cache (``scheduler.py``). Pure Python (aiohttp, prometheus_client); imports nothing of Hearth.
Flags mirror vLLM's (``python -m engines.simulator --help``; ``config.py``); unknown ones are ignored
with a warning.

Per-request faults: header ``x-sim-fault: NAME[=VALUE][,NAME...]`` or a marker ``[[sim:NAME[=VALUE]]]`` in the
last user message (the prompt for /v1/completions). An unknown name is a 400 that lists the known ones.

- ``die-mid-stream[=N]``: after N tokens (default 3) have been sent, the whole process exits with
  ``os._exit(1)``; the client's stream ends without ``[DONE]`` / ``message_stop``.
- ``drop-mid-stream[=N]``: after N tokens (default 3) this one connection is closed without the
  terminal event; the server keeps serving.
- ``stall-first=SECONDS``: silence before the first token (headers are sent at once, as vLLM does).
- ``stall-between=SECONDS``: silence before every token after the first.
- ``error-500``: HTTP 500 with an error body (OpenAI shape; Anthropic shape on /v1/messages).
- ``context-length``: the 400 context-length error with the request's real token counts.

Instance faults (flags): ``--fault-oom-at-start`` (a CUDA OOM traceback on stderr, exit 1, after
``--load-seconds``), ``--fault-oom-above-utilization RATIO`` (that OOM only when
``--gpu-memory-utilization`` is above RATIO, as when other processes hold part of the GPU),
``--fault-metrics-delay SECONDS`` (every /metrics answers that much later), ``--fault-port-taken`` (after
``--load-seconds``, uvicorn's "address already in use" error on stderr, then it hangs without listening, as SGLang
does when its port is taken), ``--fault-wake-fails [COUNT]``
(the first COUNT wakes, or every one, fail with a CUDA OOM: a 500, the engine stays asleep), and
``--load-seconds SECONDS`` (everything, /health included, answers 503 until loaded).

Sleep mode, as vLLM 0.32.0 has it (engines/simulator/SLEEP.md): with ``VLLM_SERVER_DEV_MODE=1`` in the
environment, ``POST /sleep?level=0|1|2&mode=abort|wait|keep``, ``POST /wake_up[?tags=...]``, ``GET /is_sleeping``,
``POST /collective_rpc`` (``reload_weights``) and ``POST /reset_prefix_cache`` (``sleep_api.py``); requests for
the model wait while it sleeps; ``--enable-sleep-mode`` makes a sleep free GPU memory, and ``--weights-bytes``,
``--gpu-memory-bytes``, ``--sleep-host-gb-per-s`` and ``--sleep-disk-gb-per-s`` size the memory and the copies a
wake waits for (``sleep.py``); ``hearth_sim_*`` gauges on /metrics report the memory held, for Hearth only.

``--no-anthropic`` drops ``/v1/messages`` and ``/v1/messages/count_tokens`` (404), like an engine that
serves only the OpenAI API (SGLang, older vLLM releases); ``--no-responses`` drops ``/v1/responses`` (404),
like an engine without the Responses API (SGLang, vLLM before 0.10).

Agent mode (on; ``--no-agent-mode`` turns it off): given tools and a file task ("read PATH", "write
"TEXT" to PATH", "copy SRC to DST", "replace "OLD" with "NEW" in PATH"), the model calls the tools the client
sent, chosen by their names and JSON schemas and given arguments that fit them (Claude Code's Read and Write,
OpenCode's read and write, Codex's exec_command and apply_patch, ...), one per turn, and answers once every tool
result is back, or says the task failed when a tool did; without tools it answers aider's whole-file format
when the prompt asks for it. ``agent.py`` has the grammar, ``agent_tools.py`` the reading of the tools.

``--reasoning-parser NAME`` makes every answer start with ``--reasoning-tokens`` (8) tokens of reasoning, sent
as vLLM sends a reasoning parser's output (``reasoning`` deltas, ``thinking`` blocks, ``reasoning`` items) and
counted in its usage.
"""
