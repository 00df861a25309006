"""A full disk under a real server: writes fail with a clear 507, nothing acknowledged is lost,
and the service works again once there is room; files that cannot be written: 503.

The full disk is the process's RLIMIT_FSIZE (a write past it fails with EFBIG, as ENOSPC does
on a full disk): a fault at the true edge of the world, no code of ours patched.
"""

import httpx
import pytest

from tests.conftest import task_body
from tests.e2e import server
from tests.e2e.server import all_messages, assert_seqs_contiguous, assert_valid_openai_request

pytestmark = pytest.mark.e2e
servers = server.servers  # the fixture: real uvicorn processes, ended at teardown

LIMIT = 2 << 20  # bytes any one file of the server may reach
MESSAGE_CHARS = 60_000  # so messages.jsonl reaches LIMIT after a few dozen appends
MAX_APPENDS = 200  # far more than it takes to fill LIMIT


async def test_a_full_disk_refuses_writes_with_507_and_loses_nothing(
    servers: server.ServerPool,
) -> None:
    srv = servers.start(file_size_limit=LIMIT, env={"CLEANUP_DAYS": "0"})
    acknowledged: list[tuple[int, str]] = []  # (seq, text) of every 201
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(context_length=1_000_000))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        refusal = None
        for i in range(MAX_APPENDS):
            text = f"message {i}: " + "x" * MESSAGE_CHARS
            response = await http.post(
                f"/tasks/{uuid}/messages",
                json={"role": "user", "content": text},
                headers={"Idempotency-Key": f"m-{i}"},
            )
            if response.status_code != 201:
                refusal = response
                break
            acknowledged.append((response.json()["seqs"][0], text))
        assert refusal is not None, "the limit was never reached"
        assert refusal.status_code == 507, refusal.text
        body = refusal.json()
        assert body["error"]["code"] == "insufficient_storage"
        assert str(srv.context_dir) not in refusal.text  # no server path in the answer
        assert acknowledged  # some fitted before the disk filled up

        # Still full: reads work, a write that does not fit fails as cleanly (its torn bytes
        # were cut: a small one could still fit), the server stays up.
        assert (await http.get(f"/tasks/{uuid}")).status_code == 200
        big = {"role": "user", "content": "y" * MESSAGE_CHARS * 2}
        again = await http.post(f"/tasks/{uuid}/messages", json=big)
        assert again.status_code == 507, again.text
        assert (await http.get("/healthz")).status_code == 200
    srv.kill()

    # Room again: a server without the limit on the same CONTEXT_DIR.
    roomy = servers.start(env={"CLEANUP_DAYS": "0"})
    async with httpx.AsyncClient(base_url=roomy.base_url, timeout=30) as http:
        records = await all_messages(http, uuid)
        assert_seqs_contiguous(records)
        by_seq = {r["seq"]: r["content"] for r in records}
        for seq, text in acknowledged:
            assert by_seq.get(seq) == text, f"acknowledged seq {seq} was lost"
        # A refused append may have reached messages.jsonl whole before current.jsonl failed:
        # recovered, like a crash's, but only as the one message that was sent.
        assert len(records) - len(acknowledged) <= 2
        payload = await http.get(f"/tasks/{uuid}/request")
        assert payload.status_code == 200, payload.text
        assert_valid_openai_request(payload.json())
        after = await http.post(f"/tasks/{uuid}/messages", json={"role": "user", "content": "ok"})
        assert after.status_code == 201, after.text
        assert after.json()["seqs"] == [records[-1]["seq"] + 1]


async def test_read_only_task_files_refuse_writes_with_503_and_lose_nothing(
    servers: server.ServerPool,
) -> None:
    """A task directory that cannot be written (read-only modes; the server runs without the
    capability that lets root ignore them): appends answer 503 `storage_unavailable`, with no
    path in the answer; reads go on; once writable again nothing acknowledged is missing."""
    srv = servers.start(obey_permissions=True)
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
        created = await http.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        for i in range(3):
            response = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": f"before {i}"}
            )
            assert response.status_code == 201, response.text
        directory = srv.context_dir / "running" / uuid
        files = [p for p in directory.rglob("*") if p.is_file()]
        for path in files:
            path.chmod(0o444)
        directory.chmod(0o555)
        try:
            refused = await http.post(
                f"/tasks/{uuid}/messages", json={"role": "user", "content": "refused"}
            )
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "storage_unavailable"
            assert str(srv.context_dir) not in refused.text
            history = await all_messages(http, uuid)
            assert [m["content"] for m in history][1:] == [f"before {i}" for i in range(3)]
            payload = await http.get(f"/tasks/{uuid}/request")
            assert payload.status_code == 200, payload.text
            assert_valid_openai_request(payload.json())
        finally:
            directory.chmod(0o755)
            for path in files:
                path.chmod(0o644)
        after = await http.post(
            f"/tasks/{uuid}/messages", json={"role": "user", "content": "after"}
        )
        assert after.status_code == 201, after.text
        assert after.json()["seqs"] == [5]
        history = await all_messages(http, uuid)
        assert_seqs_contiguous(history)
        assert [m["content"] for m in history][1:] == [*(f"before {i}" for i in range(3)), "after"]
