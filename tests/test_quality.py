"""--quality: fast is the default job; best picks calibration and block-wise tuning by the model's size
(quality.BEST), keeps a --calib-samples the user gave (even 16, the fast job's), and says what it chose and how long it should take.
--search-samples: the AWQ search reads only some calibration samples, spread over them; tuning reads all."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from gguf import GGUFReader

from awq2gguf import quality
from awq2gguf.calibration import Calibration
from awq2gguf.cli import main
from awq2gguf.metadata import Key
from awq2gguf.modes import Quality, TuneMode
from awq2gguf.options import Options


@pytest.mark.parametrize("n_params,samples,searched,steps", [(135e6, 128, 128, 128), (1.5e9, 128, 32, 32),
                                                              (7.6e9, 16, 16, 16)])
def test_best_is_the_preset_for_the_model_s_size(n_params, samples, searched, steps):
    job = quality.resolve(Options(quality=Quality.BEST), int(n_params))
    assert (job.calib_samples, job.search_samples, job.tune_steps, job.tune_mode) == (
        samples, searched, steps, TuneMode.BLOCKS)
    assert job.quality == Quality.FAST  # the settings spelled out: nothing left to resolve


def test_given_sample_counts_are_kept_and_fast_reads_16_unless_given():
    assert quality.resolve(Options(quality=Quality.BEST, calib_samples=40), 10**8).calib_samples == 40
    # the fast job's count, given, is a count like any other
    assert quality.resolve(Options(quality=Quality.BEST, calib_samples=16), 10**8).calib_samples == 16
    assert quality.resolve(Options(quality=Quality.BEST, calib_samples=20), 10**8).search_samples == 20  # not past all
    assert quality.resolve(Options(quality=Quality.BEST, search_samples=100), 10**8).search_samples == 100
    assert quality.resolve(Options(), 10**8) == Options(calib_samples=quality.FAST_CALIB_SAMPLES)
    assert quality.resolve(Options(calib_samples=40), 10**8) == Options(calib_samples=40)


def test_spread_samples_are_even_and_all_of_them_are_every_one_in_order():
    calib = Calibration(torch.arange(10)[:, None].repeat(1, 4), "file:x.txt", n_held_out=2)
    assert calib.spread_ids(8).equal(calib.search_ids)
    assert calib.spread_ids(3)[:, 0].tolist() == [0, 4, 7]
    assert calib.spread_ids(1)[:, 0].tolist() == [0]


def test_the_expected_time_grows_with_the_work_and_shrinks_with_threads():
    job = quality.resolve(Options(quality=Quality.BEST, threads=2), 10**8)  # self-sampled text
    seconds = quality.expected_seconds(job, 10**8, 8 * 10**7)
    assert quality.expected_seconds(job, 10**8, 16 * 10**7) > seconds
    assert quality.expected_seconds(replace(job, threads=4), 10**8, 8 * 10**7) == pytest.approx(seconds / 2)
    assert quality.expected_seconds(replace(job, calib=Path("given.txt")), 10**8, 8 * 10**7) < seconds  # no sampling
    assert quality.expected_seconds(replace(job, search_samples=8), 10**8, 8 * 10**7) < seconds
    big = quality.resolve(Options(quality=Quality.BEST, threads=2), 15 * 10**8)  # searches 32 of its 128
    assert quality.expected_seconds(replace(big, search_samples=None), 15 * 10**8, 13 * 10**8) > \
        quality.expected_seconds(big, 15 * 10**8, 13 * 10**8)


def test_best_on_the_command_line_tunes_and_says_so(tiny_hf, calib_text, tmp_path):
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(tiny_hf("Qwen2ForCausalLM", "tiny-tied")), str(out), "--calib", str(calib_text),
                                       "--calib-samples", "4", "--calib-tokens", "64", "--quality", "best"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "--quality best for" in said
    steps = quality.preset(10**6).tune_steps
    assert f"--calib-samples 4 --search-samples 4 --tune-steps {steps} --tune-mode blocks; expected about" in said
    fields = GGUFReader(out).fields
    assert fields[Key.TUNE_STEPS.gguf].contents() == steps
    assert fields[Key.TUNE_MODE.gguf].contents() == "blocks"
    assert fields[Key.CALIBRATION_SAMPLES.gguf].contents() == 4
    assert fields[Key.CALIBRATION_SEARCH_SAMPLES.gguf].contents() == 4


def test_the_search_reads_samples_spread_over_the_text_and_tuning_reads_all(tiny_hf, calib_text, tmp_path,
                                                                           monkeypatch):
    from transformers import AutoTokenizer

    from awq2gguf import calibration, tune_blocks
    from awq2gguf.awq import apply

    read = {}

    def spy(name, module, function):
        def called(model, ids, *args, **kwargs):
            read[name] = ids.clone()
            return function(model, ids, *args, **kwargs)
        monkeypatch.setattr(module, function.__name__, called)

    spy("search", apply, apply.apply_awq)
    spy("tuning", tune_blocks, tune_blocks.tune_blocks)
    model, out = tiny_hf("Qwen2ForCausalLM", "tiny-tied"), tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(model), str(out), "--calib", str(calib_text), "--calib-samples", "4",
                                       "--search-samples", "2", "--calib-tokens", "64", "--tune-steps", "1",
                                       "--tune-mode", "blocks"])
    assert result.exit_code == 0, result.output
    windows = calibration.from_file(AutoTokenizer.from_pretrained(model), calib_text, 4, 64, 4).search_ids
    assert torch.equal(read["search"], windows[[0, 3]]) and torch.equal(read["tuning"], windows)  # first and last
    fields = GGUFReader(out).fields
    assert fields[Key.CALIBRATION_SAMPLES.gguf].contents() == 4
    assert fields[Key.CALIBRATION_SEARCH_SAMPLES.gguf].contents() == 2


def test_bench_s_quality_table_runs_are_jobs_awq2gguf_makes(tiny_hf, calib_text, tmp_path):
    """Each row of bench awq --quality-table, run as the bench runs it: the quality and output type
    its label names, in the file's metadata."""
    from awq2gguf.bench.awq import _quality_runs

    runs = _quality_runs(calib_text)
    assert len({name for _, name, _ in runs}) == len(runs) == 4
    for label, name, args in runs:
        out = tmp_path / name
        result = CliRunner().invoke(main, [str(tiny_hf("Qwen2ForCausalLM", "tiny-tied")), str(out), *args,
                                           "--calib-samples", "4", "--calib-tokens", "64"])
        assert result.exit_code == 0, result.output
        fields = GGUFReader(out).fields
        assert fields[Key.OUTPUT_TYPE.gguf].contents() == ("q8_0" if "q8_0" in label else "q4_0"), label
        tuned = Key.TUNE_STEPS.gguf in fields
        assert tuned == ("best" in label), label


@pytest.mark.parametrize("args,message", [
    (["--calib-samples", "16"], "--quality-table needs --calib-samples 128 or more"),
    (["--calib-samples", "128", "--tune-steps", "8"], "--tune-steps adds variants --quality-table does not make"),
    (["--calib-samples", "128", "--seeds", "0"], "--seeds changes variants --quality-table makes as a user would"),
    (["--calib-samples", "128", "--precisions", "fp32"], "--precisions changes variants --quality-table makes"),
])
def test_bench_s_quality_table_refuses_what_it_cannot_make(args, message):
    from awq2gguf.bench.cli import main as bench_main

    result = CliRunner().invoke(bench_main, ["awq", "--quality-table", *args])
    assert result.exit_code != 0 and message in result.output
