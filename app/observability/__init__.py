"""What operators see: Prometheus metrics (``metrics``), the request middlewares that feed them
and the logs (``middleware``), and the logging configuration with the task uuid (``logs``)."""
