"""Background jobs: a table, an in-process runner with leases, retries and resume on restart."""
