"""An engine's refusal of a malformed request, through the gateway with the openai SDK, against the engine simulator
(which refuses as vLLM 0.32 does: tests/data/vllm-0.32.0-cpu-validation-errors.json)."""

from typing import Any

import openai
import pytest

from tests.simworld import Served

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_engines_validation_dump_arrives_as_one_sentence_a_field(served: Served) -> None:
    """vLLM's pydantic dump (the simulator says it as vLLM 0.32 does) reaches the client as "field: why", its param
    the field as the client wrote it; a range check's words lose vLLM's "(parameter=…)" suffix."""
    hi = [{"role": "user", "content": "Hi"}]
    with pytest.raises(openai.BadRequestError) as dump:
        served.openai().chat.completions.create(model="llama", messages=hi, temperature="hot")  # type: ignore[arg-type]
    body: Any = dump.value.body
    assert (body["message"], body["param"]) == (
        "temperature: Input should be a valid number, unable to parse string as a number",
        "temperature",
    )
    with pytest.raises(openai.BadRequestError) as ranged:
        served.openai().chat.completions.create(model="llama", messages=hi, temperature=-1)
    assert ranged.value.body["message"] == "temperature must be non-negative, got -1.0."  # type: ignore[index]
