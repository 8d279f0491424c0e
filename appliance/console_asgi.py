"""The console process's ASGI entry point: Django alone (the console, its JSON API, the admin, static
files), behind the relay processes.

appliance.web_server runs it with uvicorn on a unix socket of its own (``--uds``) and the relay processes
(appliance.asgi) forward every path that is not the gateway's to it (appliance.console_proxy), so the
console's views, which hold the GIL while they build a page, never run in a process that relays streams.
Each request's client, scheme and server come back from the relay's ``x-hearth-peer`` header
(appliance.console_peer).
"""

import asyncio
import gc
import os

from django.core.asgi import get_asgi_application

from appliance.console_peer import Receive, Scope, Send, restore
from appliance.orphan_watch import end_with_the_web_server

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
django_application = get_asgi_application()


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        watch: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                gc.freeze()  # as the relay's lifespan does (gateway.app): full collections skip start-up's objects
                watch = asyncio.ensure_future(end_with_the_web_server())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if watch is not None:
                    watch.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return
    else:
        await django_application(restore(scope) if scope["type"] == "http" else scope, receive, send)
