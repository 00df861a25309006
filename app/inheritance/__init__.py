"""Inheritance: a new run on the same task key starts from what the last finished one left."""
