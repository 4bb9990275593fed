# ctxproxy: python:3.11-slim, non-root, SQLite store in /data by default.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY policies ./policies
RUN pip install '.[postgres]' \
    && useradd --system --uid 10001 --home-dir /data --create-home ctxproxy

COPY config.example.yaml /etc/ctxproxy/config.yaml
# Listen on all interfaces inside the container and keep the database on the volume.
RUN sed -i 's#^store: .*#store: sqlite:////data/ctxproxy.db#; s#host: 127.0.0.1#host: 0.0.0.0#' /etc/ctxproxy/config.yaml

USER ctxproxy
VOLUME ["/data"]
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8787/healthz').status != 200)"
ENTRYPOINT ["ctxproxy"]
CMD ["serve", "--config", "/etc/ctxproxy/config.yaml"]
