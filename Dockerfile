# turnkeeper: the durable-execution gRPC service (docs/architecture.md).
#
#   docker build -t turnkeeper .
#   docker run -p 50051:50051 -p 50080:50080 -v turnkeeper-data:/data \
#     -v ./secrets:/secrets:ro -e TURNKEEPER_TLS_CERT=/secrets/tls.crt \
#     -e TURNKEEPER_TLS_KEY=/secrets/tls.key -e TURNKEEPER_TOKENS_FILE=/secrets/tokens.jsonl \
#     turnkeeper
#
# The service listens on 0.0.0.0 here, so it refuses to start without TLS and
# authentication; -e TURNKEEPER_INSECURE=1 serves plaintext anyway (a trial, a
# private network), with a WARNING at every start.
#
# The same image runs an agent (compose.yaml overrides the entrypoint), so the
# repository's examples/ is kept under /app, the working directory.
FROM python:3.11.14-slim-bookworm

# Logs unbuffered, so they reach `docker logs` as they are written. Prometheus
# metrics are off by default: their port has no TLS and no tokens, so on 0.0.0.0 it
# needs TURNKEEPER_INSECURE=1 too (decision 186); -e TURNKEEPER_METRICS_LISTEN=
# 0.0.0.0:9464 turns them on (compose.yaml does). The data dir is set through the
# environment, not a --data-dir flag: VYSTAK_SESSIONS_PATH and VYSTAK_TURNS_PATH
# win over TURNKEEPER_DATA_DIR, and a flag would win over them.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    TURNKEEPER_DATA_DIR=/data

# A fixed uid/gid, so a volume's ownership means the same thing on every host.
# /data is created and chowned before VOLUME: a new named volume copies it.
RUN groupadd --system --gid 10001 turnkeeper \
 && useradd --system --uid 10001 --gid turnkeeper --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin turnkeeper \
 && mkdir /data \
 && chown turnkeeper:turnkeeper /data

WORKDIR /app
COPY . .
# The server and the client with its agent extra (the example agent runs the bridge);
# pip takes the server's `turnkeeper` requirement from ./clients/python.
RUN pip install --no-cache-dir './clients/python[agent]' ./server \
 && rm -rf clients/python/build server/build clients/python/*.egg-info server/*.egg-info

# Numeric, so a runtime (Kubernetes runAsNonRoot) can tell it is not root.
USER 10001:10001
VOLUME /data
# gRPC (TurnService, CheckpointService, health, reflection), HTTP, and Prometheus
# metrics when TURNKEEPER_METRICS_LISTEN turns them on.
EXPOSE 50051 50080 9464

# The standard gRPC health service, asked by the CLI (`turnkeeper health`).
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["turnkeeper", "health", "--address", "127.0.0.1:50051"]

# Exec form: the server is PID 1 and gets `docker stop`'s SIGTERM itself, which
# starts its graceful shutdown (health NOT_SERVING, drain, flush the outbox).
STOPSIGNAL SIGTERM
ENTRYPOINT ["turnkeeper", "serve"]
CMD ["--listen", "0.0.0.0:50051"]
