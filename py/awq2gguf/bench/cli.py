"""`bench`: A/B measurements of the stock and patched builds, run interleaved in one invocation."""

from __future__ import annotations

import json
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..builds import BUILD_NAMES, get_build
from ..assets.dev_models import DEV_MODEL_NAMES, DEV_MODELS, f16_gguf, hf_folder
from ..paths import DEFAULT_EVAL_TEXT, MODELS_DIR
from ..proc_io import Awq2ggufError
from ..assets.synthetic import DEFAULT_SHAPE, SHAPES
from . import ops as ops_mod
from . import arm as arm_mod
from . import awq_compare, perplexity, plots, results, roofline as roofline_mod, serve_load, tables
from .accuracy import evaluate_model
from .llama_bench import RUNNERS, run_llama_bench
from .machine import busy_warning, cpu_info, physical_cores, threads_warning
from .models import dev_model_suite, quantized_by, synthetic_f16
from .peak_rss import peak_disk
from .speed import paired_ratios, run_interleaved
from .tasks import TASKS, load_items

err = Console(stderr=True)


def _log(msg: str) -> None:
    err.print(f"[dim]{msg}[/]")


def _parse_builds(_ctx, _param, value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILD_NAMES]
    if unknown or not names:
        raise click.BadParameter(f"unknown build(s) {', '.join(unknown) or '(none)'}; "
                                 f"choose from {', '.join(BUILD_NAMES)}")
    return names


def _comma_ints(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None


def _parse_seeds(_ctx, _param, value: str) -> tuple[int, ...]:
    seeds = _comma_ints(value)
    if len(set(seeds)) != len(seeds):
        raise click.BadParameter(f"{value!r} repeats a seed")
    return seeds


def _parse_levels(_ctx, _param, value: str) -> tuple[int, ...]:
    levels = _comma_ints(value)
    if min(levels) < 1:
        raise click.BadParameter("client counts are 1 or more")
    return levels


def _parse_tasks(_ctx, _param, value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise click.BadParameter(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)} or none")
    return names


def _options(*options):
    def apply(f):
        for option in reversed(options):
            f = option(f)
        return f
    return apply


THREADS = click.option("--threads", "-t", type=click.IntRange(min=1), default=physical_cores,
                       show_default="physical cores", help="Threads for every run.")
JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
DEV_MODEL = click.option("--dev-model", type=click.Choice(DEV_MODEL_NAMES), default=DEV_MODEL_NAMES[0],
                         show_default=True, help="Development model (rebuilt from PyPI wheels): smollm2 is "
                         "SmolLM2-135M-Instruct, qwen-coder is Qwen2.5-Coder-0.5B-Instruct.")
MODEL_OPTIONS = _options(
    click.option("--model", "-m", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="GGUF to run on every build. Default: the synthetic --shape model, quantized to --qtype "
                      "by each build's own llama-quantize (so each build runs the file it makes)."),
    click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
                 help="Synthetic model shape used when --model is not given."),
    click.option("--qtype", default="Q4_0", show_default=True, help="Quantization of the synthetic model."),
    click.option("--builds", "build_names", default="stock,patched", show_default=True, callback=_parse_builds,
                 help="Comma-separated builds to compare; ratios are against the first."),
)
SPEED_OPTIONS = _options(
    THREADS, MODEL_OPTIONS,
    click.option("--reps", type=click.IntRange(min=1), default=5, show_default=True,
                 help="Repetitions per build, interleaved ABBA."),
    click.option("--runner", type=click.Choice(sorted(RUNNERS)), default="binary", show_default=True,
                 help="binary: the build's llama-bench; python: llama-cpp-python on the build's libllama.so."),
    JSON,
    click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Also draw an A/B bar chart (PNG)."),
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Measure the stock and patched llama.cpp builds against each other.

    Speed commands run the builds interleaved in one invocation and report the ratio against
    the first build, since absolute timings on a shared machine are noisy. Every command saves
    its JSON report under bench/results/raw/; `bench report` turns the latest ones into Markdown.
    """


@contextmanager
def _progress(label: str, total: int):
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


def _check_machine(threads: int) -> str | None:
    warning = busy_warning(threads)
    for w in (threads_warning(threads), warning):
        if w:
            err.print(f"[bold yellow]warning:[/] {w}")
    return warning


def _models(builds, model, shape, qtype) -> dict[str, Path]:
    if model:
        return {b.name: model for b in builds}
    src = synthetic_f16(shape, _log)
    return {b.name: quantized_by(b, src, qtype, _log) for b in builds}


def _finish(kind: str, report: dict, table: tables.Table, as_json: bool) -> None:
    report["host"] = cpu_info().describe()
    path = results.save(kind, report)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        tables.print_rich(tables.on_host(table, report))
    if report.get("busy_warning"):
        err.print(f"[bold yellow]measured on a busy machine:[/] {report['busy_warning']}")
    if report.get("interrupted"):
        err.print("[bold yellow]interrupted:[/] the report holds only what finished")
    _log(f"saved {path}")


def _speed(kind, threads, model, shape, qtype, build_names, reps, runner, as_json, plot, n_prompt, n_gen):
    busy = _check_machine(threads)
    try:
        builds = [get_build(n) for n in build_names]
        models = _models(builds, model, shape, qtype)
        with _progress(f"{kind} runs", reps * len(builds)) as advance:
            runs, interrupted = run_interleaved(RUNNERS[runner], builds, models, threads, n_prompt, n_gen, reps,
                                                on_run=advance)
    except Awq2ggufError as e:
        raise click.ClickException(str(e)) from e
    except KeyboardInterrupt:
        err.print("interrupted before one repetition of every build finished: nothing to report")
        sys.exit(130)
    report = {
        "kind": kind, "runner": runner, "threads": threads, "reps": len(runs[0].runs), "n_prompt": n_prompt,
        "n_gen": n_gen, "busy_warning": busy, "interrupted": interrupted,
        "builds": [r.summary() for r in runs],
        "ratios": {r.build: paired_ratios(r, runs[0]) for r in runs[1:]},
    }
    _finish(kind, report, tables.speed_table(report), as_json)
    if plot:
        plots.speed_bars(report, plot)
        _log(f"plot written to {plot}")


@main.command()
@SPEED_OPTIONS
@click.option("--n-gen", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens generated per run.")
def decode(threads, model, shape, qtype, build_names, reps, runner, as_json, plot, n_gen):
    """Decode speed (tg N): tokens/s, latency per 128 tokens, peak RSS, model size."""
    _speed("decode", threads, model, shape, qtype, build_names, reps, runner, as_json, plot, 0, n_gen)


@main.command()
@SPEED_OPTIONS
@click.option("--n-prompt", type=click.IntRange(min=1), default=512, show_default=True, help="Prompt tokens per run.")
def prefill(threads, model, shape, qtype, build_names, reps, runner, as_json, plot, n_prompt):
    """Prompt processing speed (pp N): tokens/s, peak RSS, model size."""
    _speed("prefill", threads, model, shape, qtype, build_names, reps, runner, as_json, plot, n_prompt, 0)


@main.command()
@THREADS
@MODEL_OPTIONS
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True, help="Repetitions per build and test.")
@click.option("--int8-ops-per-cycle", type=click.IntRange(min=1), help="Override the detected int8 ops/cycle/core.")
@click.option("--ghz", type=click.FloatRange(min=0.1), help="Override the detected clock.")
@JSON
def roofline(threads, model, shape, qtype, build_names, reps, int8_ops_per_cycle, ghz, as_json):
    """Decode as a fraction of the memory-bandwidth bound, prefill of the int8 peak.

    Bandwidth is measured here with a STREAM-style kernel at the same thread count; the decode
    bound is bandwidth (read kernel) / weight bytes read per token.
    """
    busy = _check_machine(threads)
    try:
        builds = [get_build(n) for n in build_names]
        models = _models(builds, model, shape, qtype)
        _log("measuring memory bandwidth (STREAM read/copy/triad)")
        bandwidth = roofline_mod.measure_bandwidth(threads)
        peak = roofline_mod.int8_peak(threads, int8_ops_per_cycle, ghz)
        with _progress("roofline runs", 2 * reps * len(builds)) as advance:
            tg, _ = run_interleaved(run_llama_bench, builds, models, threads, 0, 128, reps, on_run=advance)
            pp, _ = run_interleaved(run_llama_bench, builds, models, threads, 512, 0, reps, on_run=advance)
    except Awq2ggufError as e:
        raise click.ClickException(str(e)) from e
    rows = []
    for b, t, p in zip(builds, tg, pp):
        tps_tg, tps_pp = t.summary()["tokens_per_s"]["median"], p.summary()["tokens_per_s"]["median"]
        rows.append({"build": b.name, "kernels": roofline_mod.kernel_isa(b), "model": str(models[b.name]),
                     "decode_tps": tps_tg, "prefill_tps": tps_pp,
                     **roofline_mod.fractions(models[b.name], bandwidth["read_gbs"], peak, tps_tg, tps_pp)})
    report = {"kind": "roofline", "threads": threads, "reps": reps, "busy_warning": busy, "bandwidth": bandwidth,
              "int8_peak": {"gops": peak.gops, "ops_per_cycle_per_core": peak.ops_per_cycle_per_core,
                            "ghz": peak.ghz, "cores": peak.cores, "basis": peak.basis},
              "rows": rows}
    _finish("roofline", report, tables.roofline_table(report), as_json)


@main.command()
@click.option("--op", "op_names", multiple=True, type=click.Choice(["ROPE", "MUL_MAT"], case_sensitive=False),
              default=["ROPE", "MUL_MAT"], show_default=True, help="ggml op(s) to time; repeat for several.")
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
              help="Model whose graph gives the op shapes.")
@click.option("--qtype", default="Q4_0", show_default=True, help="Weight type of the model's matmuls.")
@click.option("--builds", "build_names", default="stock,patched", show_default=True, callback=_parse_builds,
              help="Comma-separated builds to compare; ratios are against the first.")
@click.option("--reps", type=click.IntRange(min=1), default=2, show_default=True, help="Interleaved repetitions.")
@JSON
def ops(op_names, shape, qtype, build_names, reps, as_json):
    """Per-op timings (test-backend-ops perf) at the model's own shapes, as A/B ratios.

    The op list is exported from the model's compute graph at prefill (512 tokens) and decode
    (1 token) by test-export-graph-ops, so the shapes are exactly the model's.
    """
    busy = _check_machine(physical_cores())
    try:
        builds = [get_build(n) for n in build_names]
        model = quantized_by(builds[0], synthetic_f16(shape, _log), qtype, _log)
        with tempfile.TemporaryDirectory() as tmp:
            cases = ops_mod.export_cases(builds[0], model, [o.upper() for o in op_names], Path(tmp))
            with _progress("op timings", reps * len(builds)) as advance:
                timings = ops_mod.run_interleaved(builds, cases, reps, on_run=advance)
    except Awq2ggufError as e:
        raise click.ClickException(str(e)) from e
    report = {"kind": "ops", "shape": shape, "qtype": qtype, "reps": reps, "busy_warning": busy,
              "builds": [b.name for b in builds], "cases": ops_mod.summarise(timings, builds[0].name)}
    _finish("ops", report, tables.ops_table(report), as_json)


@main.command(name="eval")
@click.option("--model", "-m", "model_paths", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="GGUF to evaluate; repeat for several rows. Default: SmolLM2-135M-Instruct as FP16, stock "
                   "Q4_0 and patched all-Q4_0 of --dev-model.")
@DEV_MODEL
@click.option("--base", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Reference model for KL-divergence and top-token agreement (default with the --dev-model suite: its FP16).")
@click.option("--build", "build_name", type=click.Choice(BUILD_NAMES), default="patched", show_default=True,
              help="Build that runs every model.")
@click.option("--text", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_EVAL_TEXT,
              show_default="$AWQ2GGUF_EVAL_TEXT or ../shared/data/wikitext-2-raw-test.txt",
              help="Perplexity text (WikiText-2 raw test).")
@click.option("--ctx", type=click.IntRange(min=16), default=512, show_default=True, help="Perplexity context.")
@click.option("--chunks", type=click.IntRange(min=1), default=20, show_default=True, help="Perplexity windows.")
@click.option("--tasks", "task_names", default=",".join(TASKS), show_default=True, callback=_parse_tasks,
              help="Multiple-choice tasks, comma-separated, or none.")
@click.option("--limit", type=click.IntRange(min=1), default=250, show_default=True,
              help="First N validation items per task.")
@THREADS
@JSON
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Also draw accuracy vs size (PNG).")
def eval_(model_paths, dev_model, base, build_name, text, ctx, chunks, task_names, limit, threads, as_json, plot):
    """Accuracy: perplexity, KL-divergence to a base, multiple-choice tasks (one row per model)."""
    if not text.is_file():
        raise click.BadParameter(
            f"{text} not found. Pass --text FILE or set AWQ2GGUF_EVAL_TEXT to the WikiText-2 raw test text "
            "(the test split joined with blank lines).", param_hint="--text")
    busy = _check_machine(threads)
    try:
        build = get_build(build_name)
        if not model_paths:
            suite = dev_model_suite(dev_model, _log)
            base = base or suite[0]
            model_paths = suite
        items = {name: load_items(TASKS[name], limit) for name in task_names}
    except Awq2ggufError as e:
        raise click.ClickException(str(e)) from e

    report = {"kind": "eval", "dev_model": None if model_paths else dev_model, "build": build_name, "text": str(text), "ctx": ctx, "chunks": chunks,
              "base": str(base) if base else None, "limit": limit, "busy_warning": busy,
              "tasks": {name: TASKS[name].metric for name in task_names}, "rows": [], "interrupted": False}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if base:
                _log(f"computing base logits of {base.name}")
                base_logits = Path(tmp) / "base.kld"
                perplexity.on_text(build, base, text, ctx, chunks, threads, save_logits=base_logits)
                text_metrics = lambda m: perplexity.against_base(build, m, base_logits, threads)
            else:
                text_metrics = lambda m: perplexity.on_text(build, m, text, ctx, chunks, threads)
            total = len(model_paths) * sum(len(v) for v in items.values())
            with _progress("evaluating", total) as advance:
                for m in model_paths:
                    report["rows"].append(evaluate_model(build, m, text_metrics, items, threads, advance))
        except Awq2ggufError as e:
            if report["rows"]:
                report["error"] = str(e)
                _log(f"saved the finished rows to {results.save('eval', report)}")
            raise click.ClickException(str(e)) from e
        except KeyboardInterrupt:
            report["interrupted"] = True
    if not report["rows"]:
        err.print("interrupted before any model finished: nothing to report")
        sys.exit(130)
    _finish("eval", report, tables.eval_table(report), as_json)
    if plot:
        plots.accuracy_vs_size(report, plot)
        _log(f"plot written to {plot}")


@main.command()
@click.option("--build", "build_name", type=click.Choice(BUILD_NAMES), default="patched", show_default=True,
              help="Build that quantizes and evaluates every variant.")
@click.option("--text", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_EVAL_TEXT,
              show_default="$AWQ2GGUF_EVAL_TEXT or ../shared/data/wikitext-2-raw-test.txt",
              help="WikiText-2 raw test: perplexity on its start, calibration from its second half.")
@click.option("--ctx", type=click.IntRange(16), default=512, show_default=True, help="Perplexity context.")
@click.option("--chunks", type=click.IntRange(1), default=20, show_default=True, help="Perplexity windows.")
@click.option("--calib-samples", type=click.IntRange(1), default=16, show_default=True)
@click.option("--calib-tokens", type=click.IntRange(32), default=256, show_default=True)
@click.option("--seeds", default="0", show_default=True, callback=_parse_seeds,
              help="Comma-separated seeds: one self-sampled variant per seed, to show the spread.")
@click.option("--autoawq/--no-autoawq", default=None,
              help="Include the AutoAWQ engine (slow: ~20 min here). Default: when it is installed.")
@click.option("-t", "--threads", type=click.IntRange(1), default=physical_cores, show_default="physical cores")
@DEV_MODEL
@JSON
def awq(dev_model, build_name, text, ctx, chunks, calib_samples, calib_tokens, seeds, autoawq, threads, as_json):
    """All-Q4_0 --dev-model made by each method (plain, llama.cpp imatrix, awq2gguf with a
    calibration file and with self-sampled text, AutoAWQ), with perplexity and KLD against its
    FP16, the share of plain all-Q4_0's perplexity gap each closes, and the time and peak RSS
    each took to make."""
    if not text.is_file():
        raise click.BadParameter(f"{text} not found. Pass --text FILE or set AWQ2GGUF_EVAL_TEXT to the "
                                 "WikiText-2 raw test text.", param_hint="--text")
    if autoawq and not awq_compare.autoawq_available():
        raise click.ClickException("AutoAWQ is not installed: run `make autoawq`, or pass --no-autoawq")
    busy = _check_machine(threads)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            build = get_build(build_name)
            f16 = f16_gguf(dev_model)
            plain = quantized_by(build, f16, "Q4_0", _log)
            made = awq_compare.make_variants(
                build, hf_folder(dev_model), f16, plain, text, MODELS_DIR / "awq-compare" / dev_model, calib_samples,
                calib_tokens,
                awq_compare.autoawq_available() if autoawq is None else autoawq, threads, seeds, _log)
            _log("computing FP16 logits, then each variant's PPL and KLD")
            base_logits = Path(tmp) / "base.kld"
            fp16_ppl = perplexity.on_text(build, f16, text, ctx, chunks, threads, save_logits=base_logits)["ppl"]
            rows = awq_compare.rows(made, fp16_ppl, lambda m: perplexity.against_base(build, m, base_logits, threads))
        except Awq2ggufError as e:
            raise click.ClickException(str(e)) from e
    report = {"kind": "awq", "model": DEV_MODELS[dev_model].title, "dev_model": dev_model, "build": build_name,
              "text": str(text),
              "ctx": ctx, "chunks": chunks, "calib_samples": calib_samples, "calib_tokens": calib_tokens,
              "seeds": list(seeds), "fp16_ppl": fp16_ppl, "busy_warning": busy, "rows": rows}
    _finish("awq", report, tables.awq_table(report), as_json)


@main.command("awq-cost")
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
              help="Random-weight Hugging Face model to quantize (speed and memory do not depend on the values).")
@click.option("--calib-samples", type=click.IntRange(1), default=16, show_default=True)
@click.option("--calib-tokens", type=click.IntRange(32), default=256, show_default=True)
@THREADS
@JSON
def awq_cost(shape, calib_samples, calib_tokens, threads, as_json):
    """Wall time, peak RSS (children included) and peak disk (temporary files and OUT) of
    `awq2gguf` with its defaults (self-sampled calibration, all-Q4_0 on the patched build) on a
    random-weight bf16 HF model of --shape, made once into the models folder."""
    from ..assets.synthetic_hf import write_synthetic_hf

    busy = _check_machine(threads)
    model_dir = MODELS_DIR / f"synthetic-{shape}-hf"
    if not (model_dir / "config.json").is_file():
        _log(f"writing a random-weight {shape} Hugging Face folder -> {model_dir}")
        write_synthetic_hf(SHAPES[shape], model_dir)
    size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors")) / 2**20
    args = ["--calib-samples", str(calib_samples), "--calib-tokens", str(calib_tokens), "--threads", str(threads)]
    with tempfile.TemporaryDirectory(dir=MODELS_DIR) as tmp, peak_disk(Path(tmp)) as disk:
        try:
            made = awq_compare.awq2gguf(f"awq2gguf {shape}", model_dir, Path(tmp) / "out.gguf", args,
                                        get_build("patched"))
        except Awq2ggufError as e:
            raise click.ClickException(str(e)) from e
        out_mib = made.path.stat().st_size / 2**20
    report = {"kind": "awq-cost", "shape": shape, "threads": threads, "calib_samples": calib_samples,
              "calib_tokens": calib_tokens, "checkpoint_mib": size, "out_mib": out_mib, "seconds": made.seconds,
              "peak_rss_mib": made.peak_rss / 2**20, "peak_disk_mib": disk() / 2**20, "busy_warning": busy}
    _finish("awq-cost", report, tables.awq_cost_table(report), as_json)


@main.command()
@click.option("--target", "targets", multiple=True, type=click.Choice([t.target for t in arm_mod.TARGETS]),
              help="SVE length in bits, or a64fx; repeat for several. Default: all.")
@click.option("--shape", "shape_names", multiple=True, type=click.Choice([s.name for s in arm_mod.SHAPES]),
              help="Matmul shape; repeat for several. Default: all.")
@JSON
def arm(targets, shape_names, as_json):
    """Guest instruction counts of the Q4_0 matmuls of the cross-built ARM trees (`make arm-build`)
    under qemu-aarch64, patched/stock per SVE length and shape (Qwen2.5-0.5B's, at decode and at
    prefill). A deterministic proxy for work done, not time."""
    runs = [t for t in arm_mod.TARGETS if not targets or t.target in targets]
    shapes = [s for s in arm_mod.SHAPES if not shape_names or s.name in shape_names]
    rows = []
    try:
        with _progress("counting guest instructions under QEMU", len(runs) * len(shapes)) as advance:
            for variant, target in runs:
                for shape in shapes:
                    counts = {b: arm_mod.matmul_insns(b, variant, target, shape) for b in ("stock", "patched")}
                    rows.append({"target": target, "shape": shape.name, "k": shape.k, "n": shape.n, "m": shape.m,
                                 **counts, "ratio": counts["patched"] / counts["stock"]})
                    advance()
    except Awq2ggufError as e:
        raise click.ClickException(str(e)) from e
    report = {"kind": "arm", "note": arm_mod.PROXY_NOTE, "rows": rows}
    _finish("arm", report, tables.arm_table(report), as_json)


@main.command()
@THREADS
@click.option("--model", "-m", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="GGUF every build serves. Default: the synthetic --shape model in --qtype, quantized once by "
                   "the patched build (the same file for every build).")
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
              help="Synthetic model shape used when --model is not given.")
@click.option("--qtype", default="Q4_0", show_default=True, help="Quantization of the synthetic model.")
@click.option("--builds", "build_names", default="stock,patched", show_default=True, callback=_parse_builds,
              help="Comma-separated builds to compare; ratios are against the first.")
@click.option("--clients", "levels", default="1,2,4", show_default=True, callback=_parse_levels,
              help="Concurrent clients, comma-separated: one measurement per count.")
@click.option("--requests", "requests_per_client", type=click.IntRange(min=1), default=4, show_default=True,
              help="Requests each client sends, one after another.")
@click.option("--prompt-words", type=click.IntRange(min=2), default=100, show_default=True)
@click.option("--n-gen", type=click.IntRange(min=1), default=64, show_default=True, help="Tokens per answer.")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repetitions per build, interleaved ABBA, each on a fresh server.")
@JSON
def serve(threads, model, shape, qtype, build_names, levels, requests_per_client, prompt_words, n_gen, reps, as_json):
    """awq2gguf-serve under load: requests/s and time to first token at each client count, streamed
    completions through the OpenAI API, builds compared on the same file."""
    busy = _check_machine(threads)
    try:
        builds = [get_build(n) for n in build_names]
        model = model or quantized_by(get_build("patched"), synthetic_f16(shape, _log), qtype, _log)
        with _progress("serving load levels", reps * len(builds) * len(levels)) as advance:
            runs = serve_load.run_serve_bench(builds, model, threads, levels, reps, requests_per_client,
                                              prompt_words, n_gen, on_level=advance)
    except Awq2ggufError as e:
        raise click.ClickException(str(e)) from e
    report = {"kind": "serve", "threads": threads, "model": str(model), "reps": reps, "n_gen": n_gen,
              "prompt_words": prompt_words, "requests_per_client": requests_per_client, "busy_warning": busy,
              "rows": serve_load.summarise(runs, levels), "runs": runs}
    _finish("serve", report, tables.serve_table(report), as_json)


@main.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the Markdown here instead of stdout.")
def report(files, out):
    """Render saved results as Markdown tables: the given JSON FILES in order, or else the latest
    result of each kind (of each development model) under bench/results/raw/."""
    builders = {"decode": tables.speed_table, "prefill": tables.speed_table, "roofline": tables.roofline_table,
                "ops": tables.ops_table, "eval": tables.eval_table, "awq": tables.awq_table,
                "awq-cost": tables.awq_cost_table, "arm": tables.arm_table, "serve": tables.serve_table}
    reports = [json.loads(f.read_text()) for f in files] or [r for kind in builders for r in results.latest_each(kind)]
    if not reports:
        raise click.ClickException(f"no saved results under {results.RESULTS_DIR / 'raw'}: run a bench command first")
    text = "\n".join(tables.markdown(tables.on_host(builders[r["kind"]](r), r)) for r in reports)
    if out:
        out.write_text(text)
    else:
        click.echo(text)


if __name__ == "__main__":
    main()
