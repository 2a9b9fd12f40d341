"""Every option's default is Options', on every command line that takes it; every awq2gguf.* key a
job writes is in metadata.Key, with its type; Options refuses what the command line refuses."""

import dataclasses
from types import SimpleNamespace

import click
import pytest
import torch
from click.testing import CliRunner
from gguf import GGUFReader

from awq2gguf import quality
from awq2gguf.bench.cli import main as bench_main
from awq2gguf.calibration import Calibration
from awq2gguf.cli import main
from awq2gguf.convert import convert_hf_to_gguf
from awq2gguf.metadata import PREFIX, Key
from awq2gguf.modes import Precision, TuneMode
from awq2gguf.options import Options, OptionsError
from awq2gguf.pipeline import Summary, provenance
from awq2gguf.prune import Dropped
from awq2gguf.serve.cli import main as serve_main
from awq2gguf.tune_blocks import BlockResult

FIELDS = {f.name for f in dataclasses.fields(Options)}
# The Options fields whose options (cli_options) awq2gguf-serve and bench take too; bench's other
# options of the same names (bench lora's --drop-blocks) are its own choices.
SHARED = {"build", "threads", "calib_samples", "calib_tokens"}
# The option that sets an Options field under another name.
FIELD_OF = {"build_name": "build"}


def _defaults(command: click.Command, fields: set[str] = FIELDS) -> dict[str, object]:
    """{Options field: the default the command passes for it, through its type and callback}."""
    ctx = click.Context(command)
    return {FIELD_OF.get(p.name, p.name): p.process_value(ctx, p.get_default(ctx))
            for p in command.params if FIELD_OF.get(p.name, p.name) in fields}


def _commands():
    yield "awq2gguf", main, FIELDS
    yield "awq2gguf-serve", serve_main, SHARED
    for name, command in bench_main.commands.items():
        yield f"bench {name}", command, SHARED


# The commands that pass --calib-samples on to awq2gguf only when given: the others make calibration
# files of the fast job's count (quality.resolve of the defaults).
PASSED_ON = {"awq2gguf", "bench awq-cost"}


@pytest.mark.parametrize("name,command,fields", list(_commands()), ids=[name for name, *_ in _commands()])
def test_every_default_is_the_one_options_holds(name, command, fields):
    expected = Options() if name in PASSED_ON else quality.resolve(Options(), 10**8)
    for field, value in _defaults(command, fields).items():
        assert value == getattr(expected, field), f"{name}'s default of {field}"


def test_the_shared_options_are_there():
    assert set(_defaults(serve_main, SHARED)) == {"build", "threads"}
    assert set(_defaults(bench_main.commands["awq"], SHARED)) == SHARED


def test_awq2gguf_takes_every_field_of_options():
    assert set(_defaults(main)) == FIELDS


@pytest.mark.parametrize("given,message", [
    ({"drop_blocks": 2, "drop_list": (1,)}, "--drop-blocks and --drop-block-list: give one of them"),
    ({"drop_blocks": 2, "engine": "autoawq"}, "dropping blocks works with --engine awq2gguf only"),
    ({"tune_steps": 2, "build": "stock"}, "--tune-steps trains on a 4- or 5-bit grid"),
    ({"tune_steps": 2, "qtype": "Q8_0"}, "--tune-steps trains on a 4- or 5-bit grid"),
    ({"tune_mode": "blocks", "tune_params": "norms"}, "--tune-params norms trains the whole model's norms"),
    ({"tune_norms_steps": 2}, "--tune-norms-steps follows block-wise tuning"),
    ({"tune_steps": 2, "tune_norms_output": True}, "--tune-norms-output trains in the end-to-end tuning"),
    ({"tune_scales": True}, "--tune-scales learns the scales in the tuning"),
    ({"tune_steps": 2, "tune_scales": True, "qtype": "Q4_K_M"}, "--tune-scales learns Q4_0 blocks' scales"),
    ({"output_type": "q8_0", "qtype": "Q4_K_M"}, "--output-type q8_0 is for the all-Q4_0 file"),
    ({"output_type": "q8_0", "engine": "autoawq"}, "--output-type q8_0 is for the all-Q4_0 file"),
    ({"quality": "best", "tune_steps": 8}, "--quality best chooses --tune-steps and --tune-mode"),
    ({"quality": "best", "build": "stock"}, "--quality best tunes on a 4- or 5-bit grid"),
])
def test_options_and_the_command_line_refuse_the_same_combinations(tiny_hf, tmp_path, given, message):
    with pytest.raises(OptionsError, match=message):
        Options(**given)
    flags = {p.name: p.opts[0] for p in main.params}
    args = [a for name, value in given.items()
            for a in ((flags[name],) if value is True else  # a flag
                      (flags[name], ",".join(map(str, value)) if isinstance(value, tuple) else str(value)))]
    result = CliRunner().invoke(main, [str(tiny_hf("Qwen2ForCausalLM", "tiny-tied")), str(tmp_path / "o.gguf"), *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("given", [{"calib_tokens": 16}, {"tune_lr": 0.0}, {"threads": 0}, {"tune_mode": "fast"}])
def test_options_refuse_values_out_of_range(given):
    with pytest.raises(OptionsError):
        Options(**given)


def test_a_mode_given_as_its_string_is_its_enum():
    opts = Options(tune_mode="blocks", qtype="q8_0")
    assert opts.tune_mode is type(opts.tune_mode)("blocks") and opts.qtype == "Q8_0"


def test_every_key_the_writer_writes_is_in_the_table(tiny_hf, tmp_path):
    """The writer with every branch on (an adapter, dropped blocks, each tuning, the checks: more than
    one job does), its items written into a tiny model's GGUF as a job writes them."""
    summary = Summary(tmp_path / "out.gguf", precision=Precision.FP32, check_kld=0.1, check_plain_kld=0.2,
                      check_untuned_kld=0.15, check_tuned_kld=0.1, dropped=Dropped("sleb", (3, 1), (12.5, 13.0), 12.0),
                      tune_mode=TuneMode.BLOCKS, tune_lr_grid=0.02, tune_losses=[1.0, 0.5], tune_lr=1e-4,
                      tuned_blocks=[BlockResult(1.0, 0.5, 0.2, 0.1)], norms_losses=[0.3, 0.2], norms_lr=1e-3,
                      norms_output=True, check_blocks_kld=0.12, check_norms_kld=0.1)
    calib = Calibration(torch.zeros(5, 64, dtype=torch.long), "file:zen.txt", n_held_out=1)
    adapter = SimpleNamespace(name="my-adapter", rank=4, sha256=lambda: "0" * 64)
    items = provenance(Options(tune_steps=2, calib_samples=4), calib, summary, adapter)  # a job resolved
    out = convert_hf_to_gguf(tiny_hf("Qwen2ForCausalLM", "tiny-tied"), tmp_path / "out.gguf", "q4_0", items)
    written = {name.removeprefix(PREFIX): field.contents() for name, field in GGUFReader(out).fields.items()
               if name.startswith(PREFIX)}
    assert set(written) <= set(Key), f"not in metadata.Key: {sorted(set(written) - set(Key))}"
    assert list(written) == list(Key), "every key, in the table's order"
    for name, value in written.items():
        assert isinstance(value, Key(name).kind), (name, value)
