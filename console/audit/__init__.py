"""Audit: who did what, when, from where, and what changed. Every domain records its actions through
``console.audit.recording.record``; sign-ins, sign-outs, failed sign-ins and lockouts are recorded from
Django's and django-axes' signals (``signals``). The log has a page with filters, CSV and JSON export,
and is pruned to HEARTH_AUDIT_RETENTION_DAYS by beat.

May import: console's shared modules. Every other console domain may import it; it imports none of them.
"""
