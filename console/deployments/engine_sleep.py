"""The worker's calls to an engine's sleep routes (vLLM's, engines/simulator/SLEEP.md; which releases have them,
engines.sleep_support): put one replica's engine to sleep, wake it, ask whether it sleeps.

Each call carries the replica's per-launch key (vLLM guards only /v1 paths, but a key costs nothing and the
simulator's routes are vLLM's). An answer that is not 2xx is an EngineCallError with the engine's own message
(vLLM's ``{"error": {"message": ...}}``, FastAPI's ``{"detail": ...}``, else the text), cut to 500 characters.
vLLM before 0.32 answered /sleep and /wake_up before they were done ("FIXME: in v0 ... does not finish yet when we
return a response", vllm/entrypoints/openai/api_server.py 0.8 to 0.10): so every call ends by polling
``/is_sleeping`` until it says what was asked.
"""

import time

import httpx

from console.deployments.models import Replica

POLL_EVERY = 0.2  # seconds between /is_sleeping polls
MESSAGE_CHARS = 500


class EngineCallError(Exception):
    """An engine's sleep route failed: ``str()`` says how, in the engine's words where it gave some."""


def _headers(replica: Replica) -> dict[str, str]:
    return {"Authorization": f"Bearer {replica.engine_api_key}"}


def _message(resp: httpx.Response) -> str:
    """The engine's own words for a failed call."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:MESSAGE_CHARS]
        if body.get("detail"):
            return str(body["detail"])[:MESSAGE_CHARS]
    return (resp.text.strip() or f"HTTP {resp.status_code}")[:MESSAGE_CHARS]


def _post(replica: Replica, path: str, timeout: float, body: dict[str, str] | None = None) -> None:
    url = f"{replica.base_url}{path}"
    try:
        resp = httpx.post(url, headers=_headers(replica), json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise EngineCallError(f"{replica.runtime_name} did not answer POST {path}: {type(exc).__name__}.") from None
    if resp.status_code == 404:
        raise EngineCallError(
            f"{replica.runtime_name} has no {path.split('?')[0]} route: it was started without sleep mode."
        )
    if resp.status_code >= 300:
        raise EngineCallError(_message(resp))


def sleeping(replica: Replica, timeout: float = 5.0) -> bool:
    """``GET /is_sleeping``. Raises EngineCallError when the engine does not answer it."""
    try:
        resp = httpx.get(f"{replica.base_url}/is_sleeping", headers=_headers(replica), timeout=timeout)
        if resp.status_code == 200:
            return bool(resp.json()["is_sleeping"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        raise EngineCallError(f"{replica.runtime_name} did not say whether it sleeps.") from None
    raise EngineCallError(_message(resp))


def _until(replica: Replica, asleep: bool, deadline: float) -> None:
    while sleeping(replica) != asleep:
        if time.monotonic() > deadline:
            state = "asleep" if asleep else "awake"
            raise EngineCallError(f"{replica.runtime_name} was not {state} in time: /is_sleeping still says otherwise.")
        time.sleep(POLL_EVERY)


def sleep(replica: Replica, level: int, timeout: float) -> None:
    """Put the replica's engine to sleep at ``level`` (1: weights to host RAM; 2: dropped), letting the requests it
    runs finish (``mode=wait``; releases before 0.32 ignore the mode), within ``timeout`` seconds. Raises
    EngineCallError."""
    deadline = time.monotonic() + timeout
    _post(replica, f"/sleep?level={level}&mode=wait", timeout)
    _until(replica, True, deadline)


def wake(replica: Replica, level: int, timeout: float) -> None:
    """Wake the replica's engine from a sleep at ``level`` within ``timeout`` seconds: after level 2 the weights,
    then ``collective_rpc reload_weights``, then the KV cache (vLLM's docs/features/sleep_mode.md: a plain wake_up
    would serve garbage); after level 1 all at once. Raises EngineCallError (the engine's reason for a failed wake:
    "Call to wake_up method failed: CUDA Error: out of memory ...")."""
    deadline = time.monotonic() + timeout
    if level == 2:
        _post(replica, "/wake_up?tags=weights", timeout)
        _post(replica, "/collective_rpc", timeout, {"method": "reload_weights"})
        _post(replica, "/wake_up?tags=kv_cache", timeout)
    else:
        _post(replica, "/wake_up", timeout)
    _until(replica, False, deadline)
