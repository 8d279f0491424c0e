"""The one error every console domain raises for a request the user can correct."""

from collections.abc import Mapping

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS


class ConsoleError(ValueError):
    """A request the user can correct; the message says how, fit to show as it is (the JSON API answers
    ``status``, 400, with ``{"detail": message}``, a page shows it on its form)."""

    status = 400


class ServiceAway(ConsoleError):
    """A request refused, nothing changed, because a service the appliance needs does not answer (the API
    answers 503); the message names it and says to try again once it is back."""

    status = 503


def form_refusal(form: forms.BaseForm, names: Mapping[str, str] | None = None) -> ConsoleError:
    """A refused form's errors as the JSON API's 400: ``"field: message"`` for each, joined by "; ", the field as the
    API names it (``names``: the form's field → the API's; default the same), a message about no one field alone."""
    names = names or {}
    said = [
        f"{'' if f == NON_FIELD_ERRORS else names.get(f, f) + ': '}{' '.join(str(e) for e in errs)}"
        for f, errs in form.errors.items()
    ]
    return ConsoleError("; ".join(said))
