"""A request's end in Redis (``FINISH``: its note removed, its reservation settled with gateway.reservations'
settlement, its row spooled, its deployment's activity ended), and the ends of one gateway process's requests sent
in batches.

Each end is its own FINISH, but the ends of one turn of the event loop, and those that come while the previous
batch is on its way, go in one script call (``FINISH_MANY``): at most one call is in flight, so under load the
batches grow, and alone an end goes at the next turn. One FINISH call cost the gateway ~137 µs of CPU, mostly
redis-py's plumbing and the socket's; in batches of 3 and 8, 85 and 48 µs an end. In the bench (bench/README.md,
2026-12-05; 1-chunk answers at 64 streams) half the script calls, and with the process saturated +0.06 to +0.09
of direct throughput and 4.5 to 7.3 ms less added TTFT; the CPU a request moved within the runs' noise (+0.6 to
−7 %).

Every end keeps its own answer: FINISH's, or the error Redis raised for it alone (one end's error does not
undo or stop the others', as separate calls would not), or, when the call itself failed (Redis away, a
timeout), that error for every end of the batch, as separate calls would each have raised it.
"""

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from console.deployments import activity
from console.observability.request_spool import spool_key
from gateway.reservations import SETTLE_FUNCTION

# A request's end, as a Lua function of its KEYS (K) and ARGV (A):
# K: 1 the process's notes, 2 the spool, 3 the deployment's last-request key, 4 its in-flight set (both
#    optional), 5-12 the settlement's K (when settling).
# A: 1 the request's id, 2 1 when the request was noted, 3 its log row (JSON), 4 its cost (nano-USD, '' none)
#    when not settling, 5 1 to settle, 6 now (Unix s: the last request's time; '' leaves it), 7 activity.KEPT,
#    8-17 the settlement's A.
# Returns {1, the cost charged (nano-USD, '' none)}, or 0 when the request was noted and its note is gone (it was
# recorded elsewhere: nothing done but its activity's end).
FINISH_FUNCTION = (
    SETTLE_FUNCTION
    + """
local function finish(K, A)
  if K[4] then redis.call('ZREM', K[4], A[1]) end
  if K[3] and A[6] ~= '' then redis.call('SET', K[3], A[6], 'EX', A[7]) end
  if A[2] == '1' and redis.call('HDEL', K[1], A[1]) == 0 then return 0 end
  local cost = A[4]
  if A[5] == '1' then
    local settled = settle({unpack(K, 5)}, {unpack(A, 8)})
    cost = ''
    if settled[2] ~= '' then cost = settled[1] end
  end
  redis.call('XADD', K[2], '*', 'row', A[3], 'cost', cost)
  return {1, cost}
end
"""
)
FINISH = FINISH_FUNCTION + "return finish(KEYS, ARGV)\n"  # one request's end, alone (the reaper, the tries again)


# KEYS: every end's FINISH KEYS, one end after the other. ARGV: 1 the ends' count N, then N pairs: the count of
# the end's KEYS, of its ARGV; then every end's FINISH ARGV, one after the other.
# Returns a list of N answers: FINISH's, or {-1, the error} for an end whose FINISH raised one.
FINISH_MANY = (
    FINISH_FUNCTION
    + """
local n = tonumber(ARGV[1])
local k, a, answers = 0, 1 + 2 * n, {}
for i = 1, n do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local ok, answer = pcall(finish, {unpack(KEYS, k + 1, k + nk)}, {unpack(ARGV, a + 1, a + na)})
  if not ok then
    if type(answer) == 'table' then answer = answer.err end
    answer = {-1, tostring(answer)}
  end
  answers[i] = answer
  k, a = k + nk, a + na
end
return answers
"""
)

End = tuple[list[str], list[str | int], "asyncio.Future[Any]"]


def finish_call(
    notes: str,
    request_id: str,
    noted: bool,
    row: str,
    cost: str,
    settle: tuple[list[str], list[str | int]],
    deployment_id: int,
    now: float | None,
) -> tuple[list[str], list[str | int]]:
    """FINISH's KEYS and ARGV: the request ``request_id`` of the notes hash ``notes`` (``noted``: its note was
    written) ended with its log ``row`` (encoded) and ``cost`` (nano-USD, '' none, when not settling), settled by
    ``settle`` (``settlement``'s K and A; both empty: nothing to settle), taken out of ``deployment_id``'s requests
    in flight, and ``now`` (Unix s; None: left as it is) its last request's time."""
    keys = [notes, spool_key(), activity.last_request_key(deployment_id), activity.in_flight_key(deployment_id)]
    args: list[str | int] = [request_id, int(noted), row, cost, int(bool(settle[0]))]
    args += ["" if now is None else repr(now), activity.KEPT, *settle[1]]
    return keys + settle[0], args


class Finishes:
    """The ends waiting for the next batch, on ``redis`` (the reservations' client: no retries, short timeouts);
    ``one`` is FINISH alone, registered on it (gateway.reaper's ends, the ends tried again)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.one = redis.register_script(FINISH)
        self._many = redis.register_script(FINISH_MANY)
        self._waiting: list[End] = []
        self._sending: asyncio.Task[None] | None = None

    async def finish(self, keys: list[str], args: list[str | int]) -> Any:
        """One request's FINISH (``finish_call``'s ``keys`` and ``args``), sent with its batch:
        what FINISH returned (``[1, cost]`` or 0). Raises ResponseError when Redis refused this end, and what the
        call raised (RedisError, OSError) when the batch's call failed."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((keys, args, future))
        if self._sending is None:
            self._sending = asyncio.ensure_future(self._send())
        return await future

    async def _send(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._call(batch)
        finally:
            self._sending = None

    async def _call(self, batch: list[End]) -> None:
        keys: list[str] = []
        counts: list[int] = []
        args: list[str | int] = []
        for end_keys, end_args, _ in batch:
            keys += end_keys
            args += end_args
            counts += (len(end_keys), len(end_args))
        try:
            answers = await self._many(keys=keys, args=[len(batch), *counts, *args])
        except Exception as exc:  # RedisError, OSError: each end raises it, as its own call would have
            for *_, future in batch:
                if not future.done():  # a waiter cancelled (a stop) has cancelled its future
                    future.set_exception(exc)
            return
        for (*_, future), answer in zip(batch, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, list) and answer and answer[0] == -1:
                future.set_exception(ResponseError(_text(answer[1])))
            else:
                future.set_result(answer)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
