"""Tasks: creation, lookup, listing, lifecycle transitions, deletion."""
