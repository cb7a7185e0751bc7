"""The flash-sale run over time as a PNG: each run a column; requests per second by tier
and outcome on top, each tier's time to first token below."""

from __future__ import annotations

from pathlib import Path

from sidecar.tooling.benchmarks.report import TIERS

COLOURS = {"p0": "#c0392b", "p1": "#2471a3", "p2": "#7f8c8d"}


def plot(
    timelines: dict[str, dict[str, list]], path: Path, title: str, p0_ttft_slo_ms: float
) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no screen
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'qos-sidecar[bench]'") from None
    runs = list(timelines)
    figure, axes = plt.subplots(
        2, len(runs), figsize=(6 * len(runs), 7), sharex=True, sharey="row", squeeze=False
    )
    for column, run in enumerate(runs):
        series = timelines[run]
        t = series["t"]
        top, bottom = axes[0][column], axes[1][column]
        for tier in TIERS:
            colour = COLOURS[tier]
            top.plot(t, series[f"{tier}_served"], color=colour, label=f"{tier.upper()} served")
            if any(series[f"{tier}_shed"]):
                top.plot(t, series[f"{tier}_shed"], color=colour, linestyle="--",
                         label=f"{tier.upper()} shed")  # fmt: skip
            if any(series[f"{tier}_error"]):
                top.plot(t, series[f"{tier}_error"], color=colour, linestyle=":",
                         label=f"{tier.upper()} errors")  # fmt: skip
            points = [(x, y) for x, y in zip(t, series[f"{tier}_ttft_p99_ms"], strict=True) if y]
            if points:
                xs, ys = zip(*points, strict=True)
                bottom.plot(xs, ys, color=colour, marker=".", label=f"{tier.upper()} TTFT p99")
        top.set_title(run)
        top.set_ylabel("requests started per second")
        top.legend(fontsize="small", ncol=2)
        bottom.set_yscale("log")
        bottom.set_ylabel("TTFT p99 of requests started then (ms)")
        bottom.set_xlabel("seconds into the run")
        bottom.axhline(p0_ttft_slo_ms, color=COLOURS["p0"], linewidth=0.8, alpha=0.5)
        bottom.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
