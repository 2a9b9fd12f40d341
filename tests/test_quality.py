"""--quality: fast is the default job; best picks calibration and block-wise tuning by the model's size
(quality.BEST), keeps a --calib-samples the user gave, and says what it chose and how long it should take."""

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from gguf import GGUFReader

from awq2gguf import quality
from awq2gguf.cli import main
from awq2gguf.metadata import Key
from awq2gguf.modes import Quality, TuneMode
from awq2gguf.options import Options


@pytest.mark.parametrize("n_params,samples,steps", [(135e6, 128, 64), (1.5e9, 128, 32), (7.6e9, 16, 32)])
def test_best_is_the_preset_for_the_model_s_size(n_params, samples, steps):
    job = quality.resolve(Options(quality=Quality.BEST), int(n_params))
    assert (job.calib_samples, job.tune_steps, job.tune_mode) == (samples, steps, TuneMode.BLOCKS)
    assert job.quality == Quality.FAST  # the settings spelled out: nothing left to resolve


def test_a_given_sample_count_is_kept_and_fast_is_left_alone():
    assert quality.resolve(Options(quality=Quality.BEST, calib_samples=40), 10**8).calib_samples == 40
    fast = Options(calib_samples=40)
    assert quality.resolve(fast, 10**8) is fast


def test_the_expected_time_grows_with_the_work_and_shrinks_with_threads():
    job = quality.resolve(Options(quality=Quality.BEST, threads=2), 10**8)  # self-sampled text
    seconds = quality.expected_seconds(job, 10**8, 8 * 10**7)
    assert quality.expected_seconds(job, 10**8, 16 * 10**7) > seconds
    assert quality.expected_seconds(replace(job, threads=4), 10**8, 8 * 10**7) == pytest.approx(seconds / 2)
    assert quality.expected_seconds(replace(job, calib=Path("given.txt")), 10**8, 8 * 10**7) < seconds  # no sampling


def test_best_on_the_command_line_tunes_and_says_so(tiny_hf, calib_text, tmp_path):
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(tiny_hf("Qwen2ForCausalLM", "tiny-tied")), str(out), "--calib", str(calib_text),
                                       "--calib-samples", "4", "--calib-tokens", "64", "--quality", "best"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "--quality best for" in said and "--calib-samples 4 --tune-steps 64 --tune-mode blocks; expected about" in said
    fields = GGUFReader(out).fields
    assert fields[Key.TUNE_STEPS.gguf].contents() == 64
    assert fields[Key.TUNE_MODE.gguf].contents() == "blocks"
    assert fields[Key.CALIBRATION_SAMPLES.gguf].contents() == 4


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
