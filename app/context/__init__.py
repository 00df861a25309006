"""A task's context: message records, the committed head, crash recovery, group commit."""
