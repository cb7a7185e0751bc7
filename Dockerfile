# The sidecar image; the same image runs the mock vLLM and (later) the load reporter.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY sidecar ./sidecar
RUN pip install --no-cache-dir .
EXPOSE 50051 9090
ENTRYPOINT ["qos-sidecar"]
CMD ["serve", "--grpc-host", "0.0.0.0", "--admin-host", "0.0.0.0"]
