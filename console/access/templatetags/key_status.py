"""Template filter for a key's status: what its latest budget refusal says (console.access.key_activity)."""

from django import template

from console.access.key_activity import budget_words

register = template.Library()
register.filter("budget_words", budget_words)
