"""The internal credential a batch's line is sent to the gateway with, in ``Authorization: Bearer``.

``hearth-batch-line.{batch public id}.{line index}.{API key id}.{HMAC-SHA256 hex}``: the HMAC covers the three
fields, under a key derived from SECRET_KEY for this use alone (``salted_hmac``), so only the appliance's worker can
make one, for one line of one batch, as that batch's owner key. The gateway (gateway.batch_lines) checks it with a
constant-time compare and then serves the line as the owner's key would be served (quotas, budgets, lanes, the
request log), at the batch class. The same line always has the same credential and the same request id, which the
runner sends again after a restart and the gateway answers once (gateway.batch_lines).
"""

import hashlib
import hmac
from dataclasses import dataclass

from django.utils.crypto import salted_hmac

PREFIX = "hearth-batch-line."
SALT = "hearth.batches.line-credential"


@dataclass(frozen=True, slots=True)
class LineCredential:
    """One line of one batch, run as API key ``key_id``."""

    batch_id: str  # the batch's public id, batch_…
    index: int  # the line's place in the input file, from 0
    key_id: int  # console.access.models.ApiKey's id, the batch's owner

    @property
    def request_id(self) -> str:
        """The line's id in the output file and its request's ``x-request-id``: ``batch_req_`` and 24 hex digits,
        the same each time the line is sent."""
        return "batch_req_" + hashlib.sha256(f"{self.batch_id}:{self.index}".encode()).hexdigest()[:24]


def _mac(batch_id: str, index: int, key_id: int) -> str:
    return salted_hmac(SALT, f"{batch_id}.{index}.{key_id}", algorithm="sha256").hexdigest()


def sign(line: LineCredential) -> str:
    """The bearer token of ``line``."""
    return f"{PREFIX}{line.batch_id}.{line.index}.{line.key_id}.{_mac(line.batch_id, line.index, line.key_id)}"


def verify(token: str) -> LineCredential | None:
    """The line ``token`` names when its HMAC is right (compared in constant time), else None."""
    parts = token.removeprefix(PREFIX).split(".")
    if not token.startswith(PREFIX) or len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    batch_id, index, key_id, mac = parts[0], int(parts[1]), int(parts[2]), parts[3]
    if not hmac.compare_digest(mac.encode(), _mac(batch_id, index, key_id).encode()):
        return None
    return LineCredential(batch_id, index, key_id)


def answer_key(line: LineCredential) -> str:
    """The Redis key under which the gateway keeps a line's answer until the runner stored it (gateway.batch_lines),
    without the instance prefix (appliance.redis_keys.redis_key adds it)."""
    return f"batch-line:{line.batch_id}:{line.index}"
