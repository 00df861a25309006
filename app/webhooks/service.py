"""Delivering one webhook call: the job handler.

A delivery is a job (kind ``webhook``) queued in the same transaction as the transition it
reports, so it survives restarts, is retried with the job runner's backoff, and its outcome is
recorded on the job (``GET /jobs?task_uuid=...``). A receiver that is down never holds up the
transition itself.
"""

import hashlib
import hmac
import logging
from typing import Any

import httpx
import orjson

from app.config import Settings
from app.db.models import Job

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Context-Signature"


class WebhookFailed(Exception):
    """The receiver could not be reached or did not answer 2xx (the job is retried)."""


class WebhookDelivery:
    def __init__(self, settings: Settings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http

    async def deliver(self, job: Job) -> dict[str, Any]:
        params = job.params or {}
        name = params.get("hook", "")
        hook = self.settings.webhook.hooks.get(name)
        if hook is None:  # configuration changed since the transition
            return {"skipped": "hook_not_configured", "hook": name}
        body = orjson.dumps(
            {"event": params["event"], "hook": name, "delivery": job.id, "task": params["task"]}
        )
        headers = {
            "Content-Type": "application/json",
            "X-Context-Event": params["event"],
            "X-Context-Delivery": str(job.id),
        }
        if hook.secret is not None:
            digest = hmac.new(hook.secret.get_secret_value().encode(), body, hashlib.sha256)
            headers[SIGNATURE_HEADER] = f"sha256={digest.hexdigest()}"
        try:
            response = await self.http.post(
                hook.url, content=body, headers=headers, timeout=self.settings.webhook.timeout_s
            )
        except httpx.HTTPError as exc:
            # The URL is the operator's own configuration, but it may carry credentials: the
            # error names the hook, not the URL.
            raise WebhookFailed(f"hook {name!r}: {type(exc).__name__}") from None
        if not response.is_success:
            raise WebhookFailed(f"hook {name!r}: the receiver answered {response.status_code}")
        log.info("webhook %s: %s delivered (job %d)", name, params["event"], job.id)
        return {"hook": name, "event": params["event"], "status_code": response.status_code}
