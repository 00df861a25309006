"""A task's context: message records, the committed head, group commit, and recovery after a
crash (the files against the database head, and task directories against the task rows)."""
