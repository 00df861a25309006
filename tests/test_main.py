"""The shortest path through the service: create, append, read the payload."""

import httpx

from tests.support.tasks import task_body


async def test_create_append_request(client: httpx.AsyncClient) -> None:
    created = await client.post("/tasks", json=task_body(system_prompt="Be brief."))
    assert created.status_code == 201
    uuid = created.json()["uuid"]
    appended = await client.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "Hi"})
    assert appended.status_code == 201
    assert appended.json()["seqs"] == [2]
    payload = await client.get(f"/tasks/{uuid}/request")
    assert payload.status_code == 200
    assert payload.json()["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
