"""Webhooks (seed 000 §3.13-3.16): server-configured URLs told of completion, stop and failure."""
