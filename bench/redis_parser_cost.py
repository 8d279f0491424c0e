"""Client CPU of one Redis script call from redis-py's asyncio client, with its Python parser and with hiredis.

Usage: ``python bench/redis_parser_cost.py [--calls 5000] [--rounds 6] [--redis-url redis://127.0.0.1:6379/10]``

The gateway sends one script call per request at its end (gateway.reservations' FINISH, with the request's log row,
~700 bytes) and one per event-loop turn at starts (gateway.ledger's NOTE). This sends a script of FINISH's shape
(a hash field written and removed, ``{1, cost}`` answered) ``--calls`` times per round on one client per parser,
the two rotating for ``--rounds`` rounds in this process, and prints each round's process CPU µs per call
(time.process_time: this process only, not Redis's) and the ratio of the medians, hiredis / Python.
"""

import argparse
import asyncio
import statistics
import time

import redis.asyncio as aioredis
from redis._parsers import _AsyncHiredisParser, _AsyncRESP3Parser

SCRIPT = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) redis.call('HDEL', KEYS[1], ARGV[1]) return {1, ARGV[3]}"
ROW = '{"request_id": "' + "0" * 32 + '", "model": "bench", "usage": "' + "x" * 600 + '"}'


async def per_call(client: aioredis.Redis, calls: int) -> float:
    """Process CPU µs per script call."""
    script = client.register_script(SCRIPT)
    started = time.process_time()
    for _ in range(calls):
        await script(keys=["hearth:bench:parser"], args=["rid", ROW, "123"])
    return (time.process_time() - started) / calls * 1e6


async def main(calls: int, rounds: int, url: str) -> None:
    clients = {
        "python": aioredis.Redis.from_url(url, protocol=3, parser_class=_AsyncRESP3Parser),
        "hiredis": aioredis.Redis.from_url(url, protocol=3, parser_class=_AsyncHiredisParser),
    }
    seen: dict[str, list[float]] = {name: [] for name in clients}
    for client in clients.values():
        await per_call(client, 500)  # connections open, scripts loaded
    for n in range(rounds):
        for name in list(clients)[n % 2 :] + list(clients)[: n % 2]:
            seen[name].append(await per_call(clients[name], calls))
    for name, values in seen.items():
        print(f"{name:8s} CPU µs per call: " + " ".join(f"{v:.1f}" for v in values))
    ratio = statistics.median(seen["hiredis"]) / statistics.median(seen["python"])
    print(f"hiredis / python (medians): {ratio:.2f}")
    for client in clients.values():
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/10")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds, args.redis_url))
