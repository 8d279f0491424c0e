"""The one error every console domain raises for a request the user can correct."""


class ConsoleError(ValueError):
    """A request the user can correct; the message says how, fit to show as it is (the JSON API answers
    400 ``{"detail": message}``, a page shows it on its form)."""
