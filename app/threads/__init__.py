"""Threads: nested contexts of a task (the original design called them "Stelis"), each with
its share of the window."""
