"""Alembic migrations (a package so that installed copies of the service can find them)."""
