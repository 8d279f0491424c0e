"""A deployment's serving limits, which the gateway applies to each request: its max_tokens cap (tokens a request
may generate there, whatever it asks; None: no cap) and fit_max_tokens (an output limit over the context left
lowered to what it leaves, instead of a 400). Set on create (console.deployments.admin_actions) and changed here.
They act at once, without a relaunch: nothing in the engine's command line depends on them, so a change of them
alone recreates nothing; every gateway process reloads its routes (console.fanout). Errors a user can fix raise
ConsoleError.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.db import transaction

from console.audit.recording import changed, record
from console.deployments.agent_support import agent_facts, takes_tools
from console.deployments.models import Deployment
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from console.names import INT_MAX
from engines.stored_plan import StoredPlan

FIELDS = ("max_tokens_cap", "fit_max_tokens")


def serving_limits(dep: Deployment) -> dict[str, Any]:
    """The deployment's serving limits now, in set_serving_limits' keywords."""
    return {"max_tokens_cap": dep.max_tokens_cap, "fit_max_tokens": dep.fit_max_tokens}


def check_max_tokens_cap(cap: int | None) -> None:
    """Raises ConsoleError for a max_tokens cap outside 1 to INT_MAX tokens (None, no cap, passes)."""
    if cap is not None and not 1 <= cap <= INT_MAX:
        raise ConsoleError(f"The max_tokens cap must be from 1 to {INT_MAX:,} tokens (or empty for none).")


def only_limits_differ(settings: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether ``settings`` (console.deployments.changes' keywords, with or without FIELDS) are ``current`` but for
    the serving limits: a change the engine need not be recreated for."""
    return {k: v for k, v in settings.items() if k not in FIELDS} == {
        k: v for k, v in current.items() if k not in FIELDS
    }


def plan_with(dep: Deployment, fit_max_tokens: bool, max_tokens_cap: int | None) -> StoredPlan:
    """The deployment's stored plan with its agents judged anew (judged) for these serving limits."""
    return judged(dep, dep.stored_plan, fit_max_tokens, max_tokens_cap)


def judged(dep: Deployment, plan: StoredPlan, fit_max_tokens: bool, max_tokens_cap: int | None) -> StoredPlan:
    """``plan`` (one of ``dep``'s, stored or previewed) with its agents judged with these serving limits: which
    coding agents its context serves depends on them. An external deployment's empty plan, or one stored before
    plans named their parsers (it judged no agents), stays as it is."""
    if dep.external or plan.parsers is None:
        return plan
    tools = takes_tools(dep.engine, plan.parsers)
    agents = agent_facts(plan.max_model_len, fit_max_tokens, tools, dep.source.chat_template, max_tokens_cap)
    return replace(plan, agents=agents)


def set_serving_limits(dep: Deployment, *, max_tokens_cap: int | None, fit_max_tokens: bool) -> dict[str, list[object]]:
    """Store new serving limits (the cap checked as check_max_tokens_cap does), the plan's agents judged anew with
    them, and audit what changed; returns it. Every gateway applies them to its next request.
    Raises ConsoleError."""
    check_max_tokens_cap(max_tokens_cap)
    new = {"max_tokens_cap": max_tokens_cap, "fit_max_tokens": fit_max_tokens}
    diff = changed(serving_limits(dep), new)
    if diff:
        fields: dict[str, Any] = dict(new)
        if not dep.external:
            fields["plan"] = plan_with(dep, fit_max_tokens, max_tokens_cap).to_json()
        with transaction.atomic():
            Deployment.objects.filter(pk=dep.pk).update(**fields)
            record(None, "deployment.limits", dep, diff)
            transaction.on_commit(bump_routing_version)
        for key, value in fields.items():
            setattr(dep, key, value)
    return diff


def limits_words(dep: Deployment) -> str:
    """The serving limits in words: "max_tokens capped at 4,096; fitted to the context left"."""
    cap = f"max_tokens capped at {dep.max_tokens_cap:,}" if dep.max_tokens_cap else "no max_tokens cap"
    return cap + ("; fitted to the context left" if dep.fit_max_tokens else "; a request over the context left: 400")
