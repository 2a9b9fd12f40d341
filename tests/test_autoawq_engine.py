"""`--engine autoawq`: AutoAWQ 0.2.9's search, folded into FP weights that still compute the FP function."""

import importlib.util

import pytest
import torch
from click.testing import CliRunner
from transformers import AutoModelForCausalLM
from gguf import GGMLQuantizationType, GGUFReader

from awq2gguf.calibration import from_file
from awq2gguf.checkpoint import load_tokenizer
from awq2gguf.cli import main
from awq2gguf.metadata import Key
from awq2gguf.options import Options
from test_awq2gguf_cli import FAST, PROMPT_IDS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("awq") is None, reason="AutoAWQ is not installed: `make autoawq`")]


def test_folded_scales_leave_the_fp_logits_unchanged(tiny_hf, calib_text, tmp_path):
    """Without clipping, AutoAWQ's scales must cancel exactly. AutoAWQ 0.2.9 alone breaks this on a
    CPU (its weight snapshot aliases the live tensors); the engine's workaround restores it."""
    from awq2gguf.engines.autoawq import search_and_fold

    model_dir = tiny_hf("LlamaForCausalLM", "tiny-untied")
    tokenizer = load_tokenizer(model_dir)
    calib = from_file(tokenizer, calib_text, 4, 64)
    folded = search_and_fold(model_dir, tokenizer, calib, Options(clip=False), tmp_path / "folded")

    ids = torch.tensor([PROMPT_IDS])
    load_model = lambda d: AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)  # noqa: E731
    with torch.no_grad():
        fp, after = load_model(model_dir)(ids).logits, load_model(folded)(ids).logits
    changed = sum(not torch.equal(a, b) for a, b in zip(load_model(model_dir).parameters(),
                                                          load_model(folded).parameters()))
    assert changed > 0  # the scales did move weights around
    assert torch.allclose(after, fp, rtol=1e-4, atol=1e-4), (after - fp).abs().max()


def test_autoawq_engine_writes_an_all_q4_0_gguf_with_its_provenance(tiny_hf, calib_text, tmp_path):
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(tiny_hf("Qwen2ForCausalLM", "tiny-tied")), str(out),
                                       "--engine", "autoawq", "--calib", str(calib_text), *FAST])
    assert result.exit_code == 0, result.output
    reader = GGUFReader(out)
    assert reader.fields[Key.ENGINE.gguf].contents() == "autoawq"
    assert {t.tensor_type for t in reader.tensors if len(t.shape) == 2} == {GGMLQuantizationType.Q4_0}
