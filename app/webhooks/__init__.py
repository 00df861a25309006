"""Webhooks: server-configured URLs told of a task's completion, stop and failure."""
