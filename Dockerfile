# The context service: slim, non-root; migrates, then serves on 0.0.0.0:8080.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv
COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /srv context \
    && mkdir -p /data && chown context:context /data

USER context
# Two malloc arenas, not one per thread: the I/O threads' arenas otherwise keep ~100 MiB more
# RSS after a busy spell (bench/README.md, the replay benchmark).
ENV CONTEXT_DIR=/data HOST=0.0.0.0 PORT=8080 MALLOC_ARENA_MAX=2
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz')"
CMD ["sh", "-c", "context-service migrate && exec context-service serve"]
