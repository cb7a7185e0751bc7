"""Tooling, not the gateway: the vLLM stand-in, the local stack and the benchmark
scenarios. It uses the runtime; the runtime never imports it."""
