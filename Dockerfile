# The sidecar image; the same image runs the load reporter and the mock vLLM. With the
# extras its flags ask for: --event-loop uvloop, --tokenizer-file (exact counts).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY sidecar ./sidecar
RUN pip install --no-cache-dir ".[uvloop,exact]" \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin qos \
    && install -d -o 10001 -m 0755 /var/lib/qos-sidecar
# Not root; nothing written outside /tmp and the state directory (the manifests mount the
# root read-only, and the state directory on a volume Envoy reads too: the last known
# good configuration, and the mode as Envoy's runtime layer).
ENV QOS_STATE_DIR=/var/lib/qos-sidecar
USER 10001
EXPOSE 50051 9090
ENTRYPOINT ["qos-sidecar"]
CMD ["serve", "--grpc-host", "0.0.0.0", "--admin-host", "0.0.0.0"]
