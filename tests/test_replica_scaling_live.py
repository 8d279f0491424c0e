"""Issue 33's acceptance: a running simulator deployment's replica count 1 → 2 → 1 through the console's change form,
while a client keeps sending requests through the gateway with a key: none fails, the deployment never leaves ready,
both replicas serve while there are two, and streams longer than a stop's grace on the removed replica end whole (it
drains before it stops)."""

import threading
import time
from html.parser import HTMLParser

import httpx
import openai
import pytest

from console.deployments.models import Replica
from tests.simworld import Served

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]
CLIENTS = 3  # threads sending streamed requests, one after another each
SLOW_TOKENS = 14  # tokens of a slow stream, a second apart: longer than the 10 s a stop waits before SIGKILL


class ChangeForm(HTMLParser):
    """The change form's fields as a browser would submit them: each input's value, a checked checkbox's "on", a
    select's selected option (buttons left out: the test names the one it presses)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        name = a.get("name", "")
        if tag == "input" and name:
            if a.get("type") != "checkbox":
                self.fields[name] = a.get("value", "")
            elif "checked" in a:
                self.fields[name] = a.get("value") or "on"
        elif tag == "textarea" and name:
            self.fields[name] = ""
        elif tag == "select":
            self._select = name
        elif tag == "option" and self._select and ("selected" in a or self._select not in self.fields):
            self.fields[self._select] = a.get("value", "")


def change_form(client: httpx.Client, dep_id: int) -> dict[str, str]:
    page = client.get(f"/deployments/{dep_id}/change/")
    assert page.status_code == 200
    parser = ChangeForm()
    parser.feed(page.text)
    return parser.fields


def scale_to(served: Served, count: int) -> str:
    """Preview the count through the change form, then confirm it; returns the preview page."""
    fields = change_form(served.client, served.dep_id) | {"replica_count": str(count)}
    preview = served.client.post(f"/deployments/{served.dep_id}/change/", data=fields | {"preview": ""})
    assert preview.status_code == 200 and 'data-field="scale"' in preview.text, preview.text[-3000:]
    done = served.client.post(f"/deployments/{served.dep_id}/change/", data=fields | {"confirm": ""})
    assert done.status_code == 302, done.text[-3000:]
    return preview.text


class Traffic:
    """CLIENTS threads streaming chat completions through the gateway until stopped; every failure kept."""

    def __init__(self, served: Served) -> None:
        self.served, self.done, self.failures = served, 0, list[str]()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(CLIENTS)]

    def __enter__(self) -> "Traffic":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _run(self, worker: int) -> None:
        sdk = self.served.openai()
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                stream = sdk.chat.completions.create(
                    model="llama",
                    messages=[{"role": "user", "content": f"Client {worker}, question {n}: count to twenty."}],
                    max_tokens=24,
                    stream=True,
                )
                text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
                if not text:
                    self.failures.append(f"client {worker} request {n}: an empty answer")
                self.done += 1
            except openai.OpenAIError as exc:
                self.failures.append(f"client {worker} request {n}: {exc!r}")

    def wait_for(self, more: int, within: float = 60) -> None:
        target, deadline = self.done + more, time.monotonic() + within
        while self.done < target:
            assert time.monotonic() < deadline, f"only {self.done} requests answered"
            time.sleep(0.1)


def gauge(replica: Replica, name: str) -> float:
    """The sum of the replica's engine's samples of ``name`` (vllm:request_success_total...)."""
    text = httpx.get(f"{replica.base_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def served_by(replica: Replica) -> float:
    """Requests the replica's engine answered."""
    return gauge(replica, "vllm:request_success_total")


class SlowStreams:
    """``count`` streams of SLOW_TOKENS tokens a second apart, longer than a stop's grace (changes.STOP_GRACE_SECONDS):
    one cut when its replica stops is a failure, one drained ends whole (finish_reason "length")."""

    def __init__(self, served: Served, count: int) -> None:
        self.finishes, self.failures = list[str](), list[str]()
        self._threads = [threading.Thread(target=self._run, args=(served, i)) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def _run(self, served: Served, n: int) -> None:
        try:
            stream = served.openai().chat.completions.create(
                model="llama",
                messages=[{"role": "user", "content": f"Slow story {n} [[sim:stall-between=1]]"}],
                max_tokens=SLOW_TOKENS,
                stream=True,
            )
            self.finishes += [
                c.choices[0].finish_reason or "" for c in stream if c.choices and c.choices[0].finish_reason
            ]
        except openai.OpenAIError as exc:
            self.failures.append(f"slow stream {n}: {exc!r}")

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=120)


def wait_until(check: object, what: str, states: list[str], served: Served, within: float = 90) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        states.append(served.state()["state"])
        assert time.monotonic() < deadline, f"no {what} within {within} s"
        time.sleep(0.3)


def test_replica_count_1_2_1_through_the_console_while_a_client_keeps_asking(served: Served) -> None:
    live = Replica.objects.filter(deployment_id=served.dep_id, stopped_at__isnull=True)
    (first,) = live
    states: list[str] = []
    with Traffic(served) as traffic:
        traffic.wait_for(5)

        preview = scale_to(served, 2)
        assert 'data-field="downtime">none<' in preview
        assert 'data-field="replica-gpus">GPUs each replica takes: replica 1 GPU 0; replica 2 GPU 1.' in preview
        wait_until(lambda: sum(r.up for r in live.all()) == 2, "second replica ready", states, served)
        second = live.exclude(pk=first.pk).get()
        wait_until(lambda: served_by(second) >= 3, "requests on the second replica", states, served)
        traffic.wait_for(10)

        slow = SlowStreams(served, 4)  # least in-flight first: some run on the second replica
        wait_until(lambda: gauge(second, "vllm:num_requests_running") >= 1, "a slow stream there", states, served)
        preview = scale_to(served, 1)
        assert (
            "its requests in flight end (up to 120 s), then it stops" in preview
            and 'data-field="downtime">none<' in preview
        )
        wait_until(lambda: list(live.all()) == [first], "the second replica stopped", states, served)
        slow.join()
        traffic.wait_for(10)

    assert traffic.failures == [], traffic.failures
    assert (slow.failures, slow.finishes) == ([], ["length"] * 4)  # the second replica's drained whole
    assert set(states) <= {"ready"}, states
    second.refresh_from_db()
    assert second.stopped_at is not None and not second.running
    dep = served.state()
    assert (dep["state"], dep["replica_count"], dep["plan"]["gpu_indices"]) == ("ready", 1, [0])
    before = served_by(first)
    served.openai().chat.completions.create(model="llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert served_by(first) == before + 1  # the one left serves all
