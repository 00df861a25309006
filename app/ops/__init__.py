"""Operations: liveness, readiness and the Prometheus metrics endpoint."""
