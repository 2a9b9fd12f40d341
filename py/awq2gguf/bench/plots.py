"""PNG charts of bench reports (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def speed_bars(report, out: Path) -> None:
    """Median tokens/s per build with min-max whiskers (a commands.speed.SpeedReport)."""
    builds = report.builds
    names = [b.build for b in builds]
    med = [b.tokens_per_s["median"] for b in builds]
    low = [m - b.tokens_per_s["min"] for m, b in zip(med, builds)]
    high = [b.tokens_per_s["max"] - m for m, b in zip(med, builds)]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(names, med, yerr=[low, high], capsize=6, color=["#888888", "#2a7ab0", "#d07a2a"][:len(names)])
    for i, m in enumerate(med):
        ax.annotate(f"{m:.1f}", (i, m / 2), ha="center", va="center", color="white", fontweight="bold")
    ax.set_ylabel("tokens/s")
    ax.set_title(f"{report.kind} {report.test}, {report.threads} thread(s), {report.runner}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def accuracy_vs_size(report, out: Path) -> None:
    """Perplexity and MC average against file size, one point per model (a commands.eval.EvalReport)."""
    rows = report.rows
    fig, axes = plt.subplots(1, 2 if any(r.mc_average is not None for r in rows) else 1, figsize=(9, 3.5),
                             squeeze=False)
    panels = [("ppl", "perplexity (lower is better)", 1)]
    if axes.shape[1] == 2:
        panels.append(("mc_average", "MC accuracy average, %", 100))
    for ax, (key, label, scale) in zip(axes[0], panels):
        for r in rows:
            if (value := getattr(r, key)) is not None:
                ax.scatter(r.size_mib, value * scale)
                ax.annotate(Path(r.model).stem, (r.size_mib, value * scale), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
        ax.set_xlabel("file size, MiB")
        ax.set_ylabel(label)
    fig.suptitle(f"accuracy vs size ({report.build} build)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def accuracy_vs_speed(report, out: Path) -> None:
    """Perplexity and MC average against decode tokens/s, one line per block-dropping method,
    each point labelled with its number of blocks dropped (a commands.prune.PruneReport)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    by_method = {}
    for r in report.rows:
        if r.decode is not None:
            by_method.setdefault(r.method, []).append(r)
    unpruned = by_method.pop("none", [])
    for ax, (key, label, scale) in zip(axes, [("ppl", "perplexity (lower is better)", 1),
                                              ("mc_average", "MC accuracy average, %", 100)]):
        for method, rows in by_method.items():
            rows = sorted(unpruned + rows, key=lambda r: r.n)
            ax.plot([r.decode["median"] for r in rows], [getattr(r, key) * scale for r in rows], marker="o",
                    label=method)
            for r in rows:
                ax.annotate(str(r.n), (r.decode["median"], getattr(r, key) * scale), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("decode tokens/s (tg128)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"{report.model}: blocks dropped (labels) vs accuracy and decode speed ({report.build} build)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
