"""Operators' housekeeping: removal of finished tasks older than a cutoff (SPEC §10)."""
