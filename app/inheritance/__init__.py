"""Inheritance (seed 000 §8): a new run on the same task starts from what the last one left."""
