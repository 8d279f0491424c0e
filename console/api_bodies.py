"""What a JSON API body may hold, for every operation's input schema: only that schema's fields (Body: an unknown
field, a typo such as ``max_token_cap`` among them, is a 400 naming it, never ignored), and whole numbers as
JSON Schema's "integer" means them (Integer: a JSON number with no fraction, ``4096`` or ``4096.0``, never
``true`` or a string of digits, which pydantic's lax int would read as 1 or 4096). pydantic's StrictFloat and
StrictBool already mean a JSON number and a JSON boolean; Flags takes engine flags as an array or as one string
(split as a shell would); ModelName refuses a model's id where its name goes. Imports ninja and pydantic only."""

import shlex
from typing import Annotated

from ninja import Schema
from pydantic import BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

_JSON_TYPE = {bool: "a boolean", str: "a string", list: "an array", dict: "an object"}


def _a_json_number(value: object) -> object:
    """The value itself when it is a JSON number (int or float, bool excluded); else pydantic's int_type
    error, "Input should be a whole number, not a string" (or a boolean, an array, an object)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = _JSON_TYPE.get(type(value), type(value).__name__)
        raise PydanticCustomError("int_type", "Input should be a whole number, not {kind}", {"kind": kind})
    return value


Integer = Annotated[int, BeforeValidator(_a_json_number)]
"""An int field of a body: a JSON number with no fraction; pydantic then refuses 1.5 as "a valid integer"."""


def _flags(value: object) -> object:
    """A string of engine flags split as a shell would (``"--enable-prefix-caching --max-num-batched-tokens 8192"``,
    as the console's form takes them); a list as it is. A string a shell could not split is pydantic's value_error
    "Cannot read these flags: No closing quotation"."""
    if not isinstance(value, str):
        return value
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise PydanticCustomError("value_error", "Cannot read these flags: {why}", {"why": str(exc)}) from None


Flags = Annotated[list[str], BeforeValidator(_flags)]
"""An engine's extra flags: a JSON array of strings, or one string of them as the form takes it."""


def _a_model_name(value: object) -> object:
    """The value itself when it is not a number; a number is refused as what it likely is, a model's id: "Input
    should be the model's name, as GET /api/models lists it, not its id"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise PydanticCustomError(
            "string_type", "Input should be the model's name, as GET /api/models lists it, not its id"
        )
    return value


ModelName = Annotated[str, BeforeValidator(_a_model_name)]
"""A model named by its name (console.catalog's ModelSource.name): a number is taken for its id, and refused."""


class Body(Schema):
    """The base of every operation's input schema: a field it does not declare is refused."""

    model_config = ConfigDict(extra="forbid")
