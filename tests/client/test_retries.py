"""Both clients against a real uvicorn server, through a real proxy that loses or refuses
answers: a retried append is appended once, retries are bounded, and a call that may not be
repeated is not."""

import re
import uuid as uuid_module

import httpx
import pytest

from context_client import (
    AsyncContextClient,
    ContextClient,
    RetryPolicy,
    ServerError,
    ServiceUnreachableError,
)
from tests.support.client import task_key
from tests.support.flaky_proxy import Fault, FlakyProxy, flaky_proxy
from tests.support.server import ServerPool, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

QUICK = RetryPolicy(max_retries=3, backoff_s=0.01, backoff_max_s=0.05)
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def appends(proxy: FlakyProxy) -> list[str]:
    """The Idempotency-Key of every append the proxy saw."""
    return [
        r.headers["idempotency-key"]
        for r in proxy.requests
        if r.method == "POST" and r.path.endswith("/messages")
    ]


def test_the_sync_client_runs_a_task_on_a_real_server(servers: ServerPool) -> None:
    server = servers.start()
    with ContextClient(server.base_url) as service:
        uuid = service.create_task(task_key(), "gpt-4o", system_prompt="sys")["uuid"]
        service.append(uuid, {"role": "user", "content": "Fix a.py"})
        usage = {"prompt_tokens": 50, "completion_tokens": 7}
        service.append(uuid, {"role": "assistant", "content": "Done.", "usage": usage})
        payload = service.request_payload(uuid, format="ollama")
        assert [m["content"] for m in payload["messages"]] == ["sys", "Fix a.py", "Done."]
        assert service.complete_task(uuid)["status"] == "completed"
        stats = service.get_stats()
    assert (stats["calls"]["llm_calls"], stats["tokens"]["all"]["total"]) == (1, 57)


@pytest.mark.parametrize("fault", ["lose", "fail"])
def test_an_append_whose_answer_was_lost_is_retried_and_appended_once(
    servers: ServerPool, fault: str
) -> None:
    """The server appended, the answer never reached the client (connection closed, or a
    proxy's 502): the retry carries the same generated key, and the service replays."""
    server = servers.start()
    with flaky_proxy(server.base_url) as proxy, ContextClient(proxy.base_url, retry=QUICK) as c:
        uuid = c.create_task(task_key(), "gpt-4o")["uuid"]
        proxy.break_next(Fault("lose") if fault == "lose" else Fault("fail", 502))
        result = c.append(uuid, {"role": "user", "content": "only once"})
        history = c.list_messages(uuid)["messages"]
    keys = appends(proxy)
    assert len(keys) == 2
    assert keys[0] == keys[1]
    assert UUID4.match(keys[0])
    assert result["seqs"] == [1]
    assert [(r["seq"], r.get("content")) for r in history] == [(1, "only once")]


async def test_the_async_client_retries_an_append_once_too(servers: ServerPool) -> None:
    server = servers.start()
    async with AsyncContextClient(server.base_url, retry=QUICK) as direct:
        uuid = (await direct.create_task(task_key(), "gpt-4o"))["uuid"]
    with flaky_proxy(server.base_url) as proxy:
        async with AsyncContextClient(proxy.base_url, retry=QUICK) as service:
            proxy.break_next(Fault("lose"), Fault("fail", 500))
            batch = await service.append_batch(
                uuid, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
            )
            last_seq = (await service.list_messages(uuid))["last_seq"]
    keys = appends(proxy)
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert (batch["seqs"], last_seq) == ([1, 2], 2)


def test_a_new_call_gets_a_new_key(servers: ServerPool) -> None:
    """Two appends of the same message are two messages: the key is per call, not per body."""
    server = servers.start()
    with flaky_proxy(server.base_url) as proxy, ContextClient(proxy.base_url) as service:
        uuid = service.create_task(task_key(), "gpt-4o")["uuid"]
        for _ in range(2):
            service.append(uuid, {"role": "user", "content": "same words"})
        assert service.list_messages(uuid)["last_seq"] == 2
    first, second = appends(proxy)
    assert first != second


def test_retries_are_bounded(servers: ServerPool) -> None:
    server = servers.start()
    with flaky_proxy(server.base_url) as proxy, ContextClient(proxy.base_url, retry=QUICK) as c:
        proxy.break_next(*[Fault("refuse", 503)] * 10)
        with pytest.raises(ServerError) as failed:
            c.get_task(str(uuid_module.uuid4()))
    assert failed.value.status == 503
    assert len(proxy.requests) == 1 + QUICK.max_retries


def test_a_status_change_is_not_sent_again_once_it_may_have_been_applied(
    servers: ServerPool,
) -> None:
    """A completion whose answer was lost raises rather than being repeated (a second one
    would be refused 409 after the first succeeded); the task is completed."""
    server = servers.start()
    with flaky_proxy(server.base_url) as proxy, ContextClient(proxy.base_url, retry=QUICK) as c:
        uuid = c.create_task(task_key(), "gpt-4o")["uuid"]
        proxy.break_next(Fault("lose"))
        with pytest.raises(ServiceUnreachableError):
            c.complete_task(uuid)
        assert c.get_task(uuid)["status"] == "completed"
    completions = [r for r in proxy.requests if r.path.endswith("/complete")]
    assert len(completions) == 1


def test_a_429_is_retried_after_its_retry_after_even_for_a_status_change(
    servers: ServerPool,
) -> None:
    """A 429 (a gateway's rate limit) refused the call before the service saw it."""
    server = servers.start()
    with flaky_proxy(server.base_url) as proxy, ContextClient(proxy.base_url, retry=QUICK) as c:
        uuid = c.create_task(task_key(), "gpt-4o")["uuid"]
        proxy.break_next(Fault("refuse", 429, {"Retry-After": "0"}))
        assert c.stop_task(uuid)["status"] == "paused"
    assert [r.path for r in proxy.requests[1:]] == [f"/tasks/{uuid}/stop"] * 2


def test_a_server_that_is_not_there_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with ContextClient(url, retry=QUICK) as service, pytest.raises(ServiceUnreachableError) as no:
        service.list_tasks()
    assert isinstance(no.value.__cause__, httpx.ConnectError)
