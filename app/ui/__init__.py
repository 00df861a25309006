"""The ops page (/ui): server-rendered HTML over the services the JSON API uses, read-only."""
