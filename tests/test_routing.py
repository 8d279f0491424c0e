"""Replica choice: prefix affinity first, then least in-flight, affinity giving way under load."""

from gateway.registry import Route, Upstream
from gateway.routing import AFFINITY_SLACK, Router, prefix_key

A, B = Upstream(1, "http://a", "k"), Upstream(2, "http://b", "k")
ROUTE = Route("m", (A, B), 4096, 0)


def chat(*contents: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": c} for c in contents]}


def test_a_conversation_returns_to_the_replica_that_holds_its_prefix() -> None:
    router = Router()
    first = prefix_key("m", chat("You are a pirate. " * 200))
    second_turn = prefix_key("m", chat("You are a pirate. " * 200, "and then?"))
    assert first == second_turn  # the prefix digest only reads the start of the prompt
    router.started(B, first)
    router.finished(B)
    router.started(A, prefix_key("m", chat("other")))  # A busier by one: affinity still wins
    assert router.order(ROUTE, second_turn)[0] == B


def test_without_affinity_the_least_loaded_replica_goes_first() -> None:
    router = Router()
    router.started(A, prefix_key("m", chat("x")))
    assert router.order(ROUTE, prefix_key("m", chat("new"))) == [B, A]
    router.finished(A)
    assert router.in_flight == {}


def test_affinity_gives_way_when_its_replica_is_far_busier() -> None:
    router = Router()
    key = prefix_key("m", chat("hot prompt"))
    for _ in range(AFFINITY_SLACK):
        router.started(A, key)
    assert router.order(ROUTE, key) == [B, A]


def test_different_models_never_share_a_prefix_key() -> None:
    assert prefix_key("m1", chat("same")) != prefix_key("m2", chat("same"))
