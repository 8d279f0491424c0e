"""The one error every console domain raises for a request the user can correct."""


class ConsoleError(ValueError):
    """A request the user can correct; the message says how, fit to show as it is (the JSON API answers
    ``status``, 400, with ``{"detail": message}``, a page shows it on its form)."""

    status = 400


class ServiceAway(ConsoleError):
    """A request refused, nothing changed, because a service the appliance needs does not answer (the API
    answers 503); the message names it and says to try again once it is back."""

    status = 503
