"""The proxy: an OpenAI or Anthropic request in, the task's assembled payload sent upstream,
the answer passed back and recorded (the design: docs/proxy.md).

Per request: find or create the task; bring its stored conversation level with the one the
agent resent (append what is new, rewind first where the agent's history went another way);
take the task's payload in the wire's format (compacted, within the budget) with the request's
own parameters over it; send it to the wire's configured backend; pass the answer on as it
came (streamed events one by one) and record it as the assistant message, with its usage.
"""

import asyncio
import hashlib
import logging
import uuid as uuid_module
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import httpx
import orjson
from pydantic import ValidationError

from app.auth.keys import Principal
from app.auth.visibility import require_visible
from app.compaction.service import CompactionService
from app.context.effective import is_marker
from app.context.files import active_plan
from app.context.store import ContextStore
from app.errors import (
    AppError,
    ErrorCode,
    Forbidden,
    InvalidInput,
    RequestInvalid,
    TaskNotFound,
    Unavailable,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.formats import FORMATS
from app.llm.errors import LLMError, LLMTimeout
from app.llm.http import HTTPBackend
from app.messages.schemas import MessageIn
from app.messages.service import MessageService
from app.payloads.service import PayloadService
from app.proxy.matching import compare, message_hash
from app.proxy.resolution import (
    TaskRef,
    default_key,
    known_window,
    requested_window,
    task_ref,
)
from app.proxy.streams import AnthropicStream, EventSplitter, OpenAIStream
from app.proxy.wires import WIRES, Conversation, Wire, WireName
from app.storage.jsonl import iter_lines
from app.storage.locks import NamedLocks
from app.task_key import TaskKey
from app.tasks.creation import TaskCreation
from app.tasks.repository import running_siblings, task_exists
from app.tasks.schemas import TaskCreate

__all__ = ["ProxyAnswer", "ProxyService"]

log = logging.getLogger(__name__)

TASK_RESPONSE_HEADER = "X-Context-Task"  # on every answer: the task the request went to
# Headers of the upstream's answer passed on besides its content type: its request ids, and
# what a client's own retry and rate-limit logic reads.
_PASSED_HEADERS = ("x-request-id", "request-id", "openai-processing-ms", "retry-after")
_PASSED_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after-")
# Headers of the agent's request passed upstream (the key and the version are the server's).
_FORWARDED_HEADERS = ("anthropic-beta",)


@dataclass
class ProxyAnswer:
    """What goes back to the agent: the upstream's status, headers and body (whole, or
    streamed as it comes)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"


class ProxyService:
    def __init__(
        self,
        store: ContextStore,
        creation: TaskCreation,
        messages: MessageService,
        compaction: CompactionService,
        payloads: PayloadService,
        backends: Mapping[WireName, HTTPBackend],
        default_context_length: int,
    ) -> None:
        self.store = store
        self.creation = creation
        self.messages = messages
        self.compaction = compaction
        self.payloads = payloads
        self.backends = dict(backends)
        self.default_context_length = default_context_length
        self._locks = NamedLocks()

    def models(self) -> list[tuple[str, str]]:
        """(model, backend name) of each wire's backend, each model once."""
        seen: dict[str, str] = {}
        for backend in self.backends.values():
            seen.setdefault(backend.model, backend.name)
        return sorted(seen.items())

    async def count_tokens(self, body: dict[str, Any]) -> int:
        """The tokens of an Anthropic request as the service counts them (its counter for the
        request's model), the request as sent: no task, nothing written."""
        wire = WIRES["anthropic"]
        wire.conversation(body)  # refused as /v1/messages would refuse it
        model = wire.model(body)
        tools = body.get("tools", [])
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise RequestInvalid(
                [{"type": "list_type", "loc": ("body", "tools"), "msg": "a list of tools"}]
            )
        counting = self.store.counting
        counter = await asyncio.to_thread(lambda: counting.counter(counting.counter_name(model)))
        try:
            return FORMATS["anthropic"].payload_tokens(counter, body)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            # A block or tool of a shape the service does not count (it validated the rest).
            raise InvalidInput(
                f"this request holds a block or tool the service cannot count: {exc!r}",
                code=ErrorCode.VALIDATION_ERROR,
                details={},
            ) from None

    async def forward(
        self,
        wire_name: WireName,
        body: dict[str, Any],
        headers: Mapping[str, str],
        principal: Principal,
        task_in_path: str | None = None,
    ) -> ProxyAnswer:
        """One proxied request (``headers`` by lower-case name; ``task_in_path``: the task its
        URL names), answered as the upstream answered it."""
        wire = WIRES[wire_name]
        backend = self.backends.get(wire_name)
        if backend is None:
            raise Unavailable(
                f"no backend is configured for the {wire_name} wire: set "
                f"PROXY__{wire_name.upper()}_BACKEND to a configured backend of kind {wire_name}",
                code=ErrorCode.PROXY_NOT_CONFIGURED,
                details={"setting": f"PROXY__{wire_name.upper()}_BACKEND"},
            )
        conversation = wire.conversation(body)
        ref = task_ref(headers, wire.task_uuid_field(body), task_in_path)
        task_uuid = await self._resolve(ref, wire, body, conversation, headers, principal)
        async with self._locks(task_uuid):
            await self._sync(task_uuid, conversation.messages)
            payload = await self._payload(task_uuid, wire, body)
        streaming = body.get("stream") is True
        if streaming:
            payload["stream"] = True
            if wire.name == "openai":  # the usage is what the recording needs
                asked = body.get("stream_options")
                payload["stream_options"] = (asked if isinstance(asked, dict) else {}) | {
                    "include_usage": True
                }
        forwarded = {h: headers[h] for h in _FORWARDED_HEADERS if h in headers}
        try:
            response = await backend.relay(payload, forwarded)
        except LLMError as exc:
            kind = UpstreamTimeout if isinstance(exc, LLMTimeout) else UpstreamUnavailable
            raise kind(str(exc), details={"attempts": exc.attempts}) from None
        answer_headers = {TASK_RESPONSE_HEADER: task_uuid} | {
            name: value
            for name, value in response.headers.items()
            if name in _PASSED_HEADERS or name.startswith(_PASSED_PREFIXES)
        }
        media_type = response.headers.get("content-type", "application/json")
        if not streaming or not response.is_success:
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
            if response.is_success:
                await self._record(task_uuid, wire, raw)
            return ProxyAnswer(response.status_code, answer_headers, raw, media_type=media_type)
        return ProxyAnswer(
            response.status_code,
            answer_headers,
            stream=self._relayed_events(task_uuid, wire, body, response),
            media_type=media_type,
        )

    # -- which task ---------------------------------------------------------------------

    async def _resolve(
        self,
        ref: TaskRef,
        wire: Wire,
        body: Mapping[str, Any],
        conversation: Conversation,
        headers: Mapping[str, str],
        principal: Principal,
    ) -> str:
        """The uuid of the task the request names, created from the request if there is none."""
        if ref.uuid is not None:
            async with self.store.db.reader() as session:
                exists = await task_exists(session, ref.uuid)
            if exists:
                try:
                    await require_visible(self.store.db, ref.uuid, principal)
                    return ref.uuid
                except TaskNotFound:
                    pass  # another tenant's: answered as a create on a uuid taken by any task
            key = ref.key or default_key(ref.uuid)
            async with self._locks(ref.uuid):
                return await self._create(
                    ref.uuid, ref, key, wire, body, conversation, headers, principal
                )
        assert ref.key is not None  # task_ref gives a uuid or a key
        name = orjson.dumps([ref.key.model_dump(), ref.user]).decode()
        async with self._locks(name):  # two first requests of one key make one task
            async with self.store.db.reader() as session:
                _, running = await running_siblings(session, ref.key, ref.user, "", 1)
            if running and principal.allows(ref.user, ref.key.task_source):
                return running[0]
            task_uuid = str(uuid_module.uuid4())
            return await self._create(
                task_uuid, ref, ref.key, wire, body, conversation, headers, principal
            )

    async def _create(
        self,
        task_uuid: str,
        ref: TaskRef,
        key: TaskKey,
        wire: Wire,
        body: Mapping[str, Any],
        conversation: Conversation,
        headers: Mapping[str, str],
        principal: Principal,
    ) -> str:
        if not principal.allows(ref.user, key.task_source):
            raise Forbidden(
                "this key may not create tasks for that user or task source",
                code=ErrorCode.OUT_OF_SCOPE,
            )
        model = wire.model(body)
        window = requested_window(headers) or known_window(model) or self.default_context_length
        wanted = wire.max_output_tokens(body)
        try:
            create = TaskCreate.model_validate(
                {
                    "uuid": task_uuid,
                    "task_key": key.model_dump(),
                    "user": ref.user,
                    "llm_provider": wire.name,
                    "model": model,
                    "context_length": window,
                    # The answer's room, when the request's leaves room for a context.
                    "max_output_tokens": wanted if wanted and wanted <= window // 2 else None,
                    "system_prompt": conversation.system,
                    "tools": wire.tools(body) or None,
                }
            )
        except ValidationError as exc:
            raise RequestInvalid(
                [{**e, "loc": ("task", *e["loc"])} for e in exc.errors()],
                hint="the task this request would create does not validate",
            ) from None
        view, _ = await self.creation.create(create)
        log.info("task %s: created by the %s proxy", task_uuid, wire.name)
        return view.task.uuid

    # -- the conversation ---------------------------------------------------------------

    async def _sync(self, task_uuid: str, incoming: list[dict[str, Any]]) -> None:
        """Bring the stored conversation level with ``incoming``: rewind where they part,
        append the rest as one batch (all or nothing, once however often it is retried)."""
        snapshot = await self.store.snapshot(task_uuid, "messages")
        try:
            stored = await asyncio.to_thread(
                _posted_conversation, snapshot.handle, snapshot.head.messages_bytes
            )
            last_seq = snapshot.head.last_seq
        finally:
            snapshot.close()
        hashes = [message_hash(message) for message in incoming]
        sync = compare([h for _, h in stored], hashes)
        if sync.diverged:
            if sync.common:
                await self.compaction.rewind(task_uuid, stored[sync.common - 1][0], True)
            else:
                await self.compaction.rewind(task_uuid, stored[0][0], False)
            log.info(
                "task %s: the agent's history parts from the stored one after %d messages; rewound",
                task_uuid,
                sync.common,
            )
        rest = incoming[sync.common :]
        if not rest:
            return
        # The same request on the same stored history makes the same key: a retry appends
        # nothing twice. The last seq moves with every append and rewind, so a later request
        # that happens to resend the same messages is not taken for a retry.
        digest = hashlib.sha256(f"{task_uuid}:{last_seq}:{','.join(hashes)}".encode())
        await self.messages.append(
            task_uuid,
            [MessageIn.model_validate(message) for message in rest],
            f"proxy-{digest.hexdigest()[:48]}",
        )

    async def _payload(self, task_uuid: str, wire: Wire, body: Mapping[str, Any]) -> dict[str, Any]:
        """The task's assembled payload in the wire's format, the request's parameters over it."""
        assembled = await self.payloads.request(task_uuid, wire.name)
        payload: dict[str, Any] = orjson.loads(await assembled.read())
        carried = wire.carried(body)
        if wire.max_output_tokens(carried) is not None:  # the agent's limit, under its own name
            payload.pop("max_tokens", None)
            payload.pop("max_completion_tokens", None)
        return payload | carried

    # -- the answer ---------------------------------------------------------------------

    async def _relayed_events(
        self, task_uuid: str, wire: Wire, body: Mapping[str, Any], response: httpx.Response
    ) -> AsyncIterator[bytes]:
        """The upstream's events passed on as they come; the answer they make up recorded
        once the stream has ended, before the agent gets the event that ends it (an SDK's
        stream ends there: the agent's next request then finds the answer recorded, with its
        usage, and does not bring it first, without)."""
        asked = body.get("stream_options")
        keep_usage = isinstance(asked, dict) and asked.get("include_usage") is True
        events: OpenAIStream | AnthropicStream = (
            OpenAIStream(keep_usage=keep_usage) if wire.name == "openai" else AnthropicStream()
        )
        splitter = EventSplitter()
        held: list[bytes] = []  # the ending event, and any after it
        try:
            async for chunk in response.aiter_bytes():
                passed: list[bytes] = []
                for event in splitter.feed(chunk):
                    if events.take(event):
                        (held if events.done else passed).append(event)
                if passed:
                    yield b"".join(passed)
            rest = splitter.rest()
            if rest and events.take(rest):
                if events.done:
                    held.append(rest)
                else:
                    yield rest
        finally:
            await response.aclose()
        if events.done:
            await self._store_reply(task_uuid, wire.reply(events.answer()))
        else:
            log.warning("task %s: the upstream stream ended early; nothing recorded", task_uuid)
        if held:
            yield b"".join(held)

    async def _record(self, task_uuid: str, wire: Wire, raw: bytes) -> None:
        try:
            answer = orjson.loads(raw)
            reply = wire.reply(answer)
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            log.warning("task %s: the upstream's answer does not read; not recorded", task_uuid)
            return
        await self._store_reply(task_uuid, reply)

    async def _store_reply(self, task_uuid: str, reply: dict[str, Any]) -> None:
        """Record the answer. The agent gets it whatever happens here: a reply that cannot be
        recorded now is appended with the agent's next request, which resends it."""
        try:
            message = MessageIn.model_validate(reply)
            await self.messages.append(task_uuid, [message], None)
        except (AppError, ValidationError) as exc:
            log.warning("task %s: the upstream's answer was not recorded: %s", task_uuid, exc)


def _posted_conversation(f: BinaryIO, end: int) -> list[tuple[int, str]]:
    """(seq, hash) of the stored conversation: the messages of the history, as a rewind left
    it (compactions change what a payload shows, not what was said), its leading system
    messages (the task's prompt, an inherited summary) left out."""
    removed = active_plan(f, end)
    conversation: list[tuple[int, str]] = []
    for _, line in iter_lines(f, 0, end):
        record: dict[str, Any] = orjson.loads(line)
        if is_marker(record) or removed.is_removed(record["seq"]):
            continue
        if not conversation and record.get("role") == "system":
            continue
        conversation.append((record["seq"], message_hash(record)))
    return conversation
