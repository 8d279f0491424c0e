"""gateway.callers.offered_keys: the keys a request offers, and the 401 that says what was wrong when it offers none
(a key pasted into the Authorization header without its Bearer scheme is told so, its value never echoed)."""

import json

import pytest

from gateway.callers import offered_keys
from gateway.errors import GatewayError, Surface


def offered(*headers: tuple[str, str]) -> list[str]:
    return offered_keys({"headers": [(name.encode(), value.encode()) for name, value in headers]})


def refusal(*headers: tuple[str, str]) -> dict[str, str]:
    with pytest.raises(GatewayError) as refused:
        offered(*headers)
    assert refused.value.status == 401
    error: dict[str, str] = json.loads(refused.value.body(Surface.OPENAI))["error"]
    return error


def test_keys_come_from_x_api_key_then_bearer() -> None:
    assert offered(("authorization", "Bearer hk-one"), ("x-api-key", "hk-two")) == ["hk-two", "hk-one"]
    assert offered(("authorization", "bearer  hk-one ")) == ["hk-one"]


def test_no_key_says_how_to_send_one_and_a_key_without_its_scheme_says_so_unechoed() -> None:
    for headers in ((), (("authorization", "Bearer"),), (("authorization", "Bearer   "),), (("x-api-key", " "),)):
        error = refusal(*headers)
        assert error["code"] == "missing_api_key" and error["message"].startswith("No API key given.")
    for value in ("hk-pasted-alone", "Basic aGs6c2VjcmV0", "Token hk-pasted"):
        error = refusal(("authorization", value))
        assert error["message"] == (
            "An Authorization header came without 'Bearer ' before the key. "
            "Send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'."
        )
        assert error["code"] == "missing_api_key" and value.split()[-1] not in json.dumps(error)
