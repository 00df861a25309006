"""Operators' housekeeping: what needs their eye (orphans), and removal of finished tasks
older than a cutoff."""
