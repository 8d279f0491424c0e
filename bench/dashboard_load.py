"""A logged-in console user refreshing the dashboard while ``gateway_overhead.py --dashboard`` relays streams.

``seed_console`` (in the benchmark process, after ``procs.seed``) gives the bench deployment's replica
``--history-hours`` of scrape-resolution history, the gateway's per-scrape counts and an hour of request-log
rows (``history_fill.py``'s generators, 2 requests/s), rolls them up as the worker would, and logs a
superuser in. ``refresh`` then GETs what an open console asks for, the dashboard page ``/``, its htmx refresh
``/dashboard/live/`` and the deployment's panel ``/deployments/<id>/panel/``, once every ``period`` seconds
(a refresh every second: twice as often as the htmx poll of 2 s), on the benchmark's own loop.
"""

import asyncio
import secrets
import time

import aiohttp

PERIOD = 1.0  # seconds between refreshes


def seed_console(hours: float) -> tuple[dict[str, str], int]:
    """History for the "bench" deployment and a logged-in superuser: (the session cookie, the deployment's
    id). Needs Django set up on the benchmark's database (``procs.seed`` does it)."""
    import history_fill
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from console.deployments.models import Deployment
    from console.observability import history

    dep = Deployment.objects.get(name="bench")
    now = time.time()
    if hours > 0:
        for replica in dep.replicas.all():
            history_fill.fill_history(replica, now, hours * 3600)
        history_fill.fill_gateway(dep, now, hours * 3600)
        history_fill.fill_requests(dep, now)
        history.roll_up(now, history_fill.INTERVAL)
    user = User.objects.create_superuser("bench-console", "", secrets.token_urlsafe(16))
    client = Client()
    client.force_login(user)  # django-axes wants a request for login()
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}, dep.pk


async def refresh(
    base_url: str, cookies: dict[str, str], deployment: int, stop: asyncio.Event, period: float = PERIOD
) -> list[float]:
    """GET the dashboard, its live part and the deployment's panel every ``period`` s until ``stop`` is set;
    each refresh's seconds (the three one after the other). Raises RuntimeError on an answer that is not 200
    (a redirect to the login page included)."""
    urls = ["/", "/dashboard/live/", f"/deployments/{deployment}/panel/"]
    took = []
    async with aiohttp.ClientSession(base_url, cookies=cookies) as session:
        while not stop.is_set():
            started = time.perf_counter()
            for url in urls:
                async with session.get(url, allow_redirects=False) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"GET {url}: HTTP {resp.status}")
            took.append(time.perf_counter() - started)
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, period - took[-1]))
            except TimeoutError:
                pass
    return took
