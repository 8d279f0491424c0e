"""A deployment checked before prices came from capacity charges from its last finished check at once (capacity
0002): the prompt + output tokens/s of the most load that held the SLO the check ran at; one never checked has no
measurement, and the plan's estimate stands."""

import pytest

from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [
    ("capacity", "0001_initial"),
    ("observability", "0013_deployment_price"),
    ("deployments", "0011_fit_max_tokens_on_by_default"),
]
AFTER = [("capacity", "0002_price_from_last_check")]


def test_the_last_finished_check_that_held_its_slo_becomes_the_deployments_capacity() -> None:
    with schema_at(BEFORE) as before:
        deployment = before.get_model("deployments", "Deployment")
        run_model, result = before.get_model("capacity", "CapacityRun"), before.get_model("capacity", "CapacityResult")

        def made(name: str) -> int:
            fields = {"served_model_name": name, "engine": "simulator", "max_model_len": 0, "kv_space_gib": 1}
            return int(deployment.objects.create(name=name, plan={}, **fields).pk)

        checked, never = made("checked"), made("never")

        def run(state: str, day: int, levels: list[tuple[float, float, int]]) -> int:
            row = run_model.objects.create(
                deployment_id=checked, deployment_name="checked", profile="chat", mode="concurrency", levels=[1],
                requests_per_level=10, max_seconds=60, state=state, finished_at=f"2026-11-{day:02d}T10:00:00Z",
                provenance={"slo": {"ttft_seconds": 2.0, "itl_seconds": None, "set": True}},
            )  # fmt: skip
            for prompt, ttft, failed in levels:
                result.objects.create(
                    run=row, level=1, requests=10, succeeded=10 - failed, duration_s=60, ttft_p90=ttft, itl_p90=0.5,
                    output_tokens_per_s=2 * prompt, prompt_tokens_per_s=prompt, goodput_rps=1, goodput_ratio=1,
                )  # fmt: skip
            return int(row.pk)

        run("done", 1, [(100, 1.0, 0)])  # older
        last = run("done", 2, [(200, 1.0, 0), (400, 1.9, 0), (800, 2.5, 0), (900, 1.0, 2)])
        run("failed", 3, [(1000, 1.0, 0)])  # did not finish
        after = migrate(AFTER)
        prices = {p.deployment_id: p for p in after.get_model("observability", "DeploymentPrice").objects.all()}
        assert set(prices) == {checked} and never not in prices
        assert (prices[checked].measured_tokens_per_second, prices[checked].measured_run_id) == (1200.0, last)
