"""Access: who may use the appliance. Members and their roles (admin, member, viewer) with the limits an
admin sets them (members), the one table of who may reach which URL (policy, enforced by middleware),
sign-in (a password throttled by django-axes, or the company's OpenID provider: oidc) and the password
change, and the API keys tools hold: their format and hash (key_format), their limits (key_limits), issue,
rotation and revoke (keys), with their pages and API router.

May import: console.audit, appliance (appliance.redis_keys, for the one-time secrets' Redis keys) and
console's shared modules. Nothing of the other console domains, nor engines. The keys pages count each
key's requests through ApiKey's ``requests`` relation (the request log's foreign key), without importing
console.observability, which adds the link to a key's requests to its page (page_parts); allowed models
are checked against the deployments' served model names, which the console's shell hands over
(served_models).
"""
