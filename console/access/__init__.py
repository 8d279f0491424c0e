"""Access: who may use the appliance. Sign-in and the first admin, and the API keys tools hold (their
format and hash in key_format, issue and revoke in keys), with their pages and API router.

May import: console's shared modules. Nothing of the other console domains, nor engines or appliance.
"""
