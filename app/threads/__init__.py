"""Threads (seed 003, "Stelis"): nested contexts of a task, each with its share of the window."""
