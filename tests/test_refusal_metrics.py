"""A request the gateway refuses before choosing an engine is counted in /metrics under the model its body named
when that model is deployed, in its outcomes too, as its request-log row counts on the panels (a trial: 503s for a
model still loading were counted under model "" and in no outcome, while the panel said "error 37"); a name no
deployment has stays "", so clients cannot grow the labels without end (gateway.accounting.count_refusal)."""

from prometheus_client import REGISTRY

from gateway.accounting import count_refusal

DEPLOYED = {"smol": "loading"}


def counted(model: str, status: str, outcome: str) -> tuple[float, float]:
    requests = {"model": model, "surface": "openai", "status": status}
    return (
        REGISTRY.get_sample_value("hearth_gateway_requests_total", requests) or 0.0,
        REGISTRY.get_sample_value("hearth_gateway_request_outcomes_total", {"model": model, "outcome": outcome}) or 0.0,
    )


def test_a_refusal_naming_a_deployed_model_is_counted_under_it_with_its_outcome() -> None:
    loading, refused = counted("smol", "503", "error"), counted("smol", "400", "refused")
    count_refusal("openai", 503, "smol", DEPLOYED)
    count_refusal("openai", 400, "smol", DEPLOYED)
    assert counted("smol", "503", "error") == (loading[0] + 1, loading[1] + 1)
    assert counted("smol", "400", "refused") == (refused[0] + 1, refused[1] + 1)


def test_a_refusal_naming_no_deployed_model_is_counted_under_no_model() -> None:
    unnamed = counted("", "404", "refused")
    count_refusal("openai", 404, "made-up-name", DEPLOYED)
    count_refusal("openai", 404)
    assert counted("", "404", "refused")[0] == unnamed[0] + 2
    assert (
        REGISTRY.get_sample_value(
            "hearth_gateway_requests_total", {"model": "made-up-name", "surface": "openai", "status": "404"}
        )
        is None
    )
