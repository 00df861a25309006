"""Operations: health and readiness (stats, metrics and cleanup arrive later)."""
