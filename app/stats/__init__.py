"""GET /stats: the operators' aggregate view of the tasks table."""
