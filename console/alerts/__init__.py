"""Alerts (issue 31): rules an admin turns on and tunes, evaluated by beat (tasks.evaluate_alerts), each alert
fired once, repeated at its rule's interval while it holds and resolved with a message, delivered to a webhook
(JSON with a Slack-compatible ``text``), by email (Django's SMTP settings) and to the console's header.

May import: console.observability, console.deployments, console.access, console.audit (rule and destination changes
are audited), appliance, engines (engines.room's words for a duration) and the shared modules.
"""
