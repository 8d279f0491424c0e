"""A new deployment's names against the others': one that differs from another's only in case is refused. The
APIs match model names exactly, so 'SMOL' beside 'smol' is a request for the wrong one waiting to happen (a fresh
user's 'SMOL', never launched, answered a request with a stopped deployment's 503). Exact clashes are the database's
unique constraints."""

from console.deployments.models import Deployment
from console.errors import ConsoleError


def refuse_case_clash(name: str, served: str) -> None:
    """Raises ConsoleError naming the deployment whose name (or served model name) is ``name`` (``served``) in
    another case."""
    named = Deployment.objects.filter(name__iexact=name).exclude(name=name).values_list("name", flat=True).first()
    if named is not None:
        raise ConsoleError(
            f"A deployment named '{named}' exists already; '{name}' differs from it only in case, which the tools "
            "asking for models by name would confuse. Pick another name."
        )
    serving = Deployment.objects.filter(served_model_name__iexact=served).exclude(served_model_name=served)
    holder = serving.values_list("name", "served_model_name").first()
    if holder is not None:
        raise ConsoleError(
            f"Deployment '{holder[0]}' serves the model name '{holder[1]}'; '{served}' differs from it only in case, "
            "which the tools asking for models by name would confuse. Pick another served model name."
        )
