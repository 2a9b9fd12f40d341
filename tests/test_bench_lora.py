"""bench lora's fine-tune: trains on the text's second half, lowers its loss, saves an adapter --lora reads."""

import json

from awq2gguf import lora
from awq2gguf.bench.lora import make_adapter, training_lines


def test_training_lines_come_from_the_second_half_without_headings():
    second = "= = Part = =\nsecond half one\n\nsecond half two\n"
    text = "first half\n" + "x" * (len(second) - 13) + " cut\n" + second
    assert training_lines(text, 5) == ["second half one", "second half two"]
    assert training_lines(text, 1) == ["second half one"]


def test_fine_tune_lowers_the_loss_and_saves_an_adapter_lora_reads(tiny_hf, calib_text, tmp_path):
    losses = []
    lines = [l for l in calib_text.read_text().split("\n") if l][:20]
    out = make_adapter(tiny_hf("Qwen2ForCausalLM", "tiny-tied"), lines, tmp_path / "adapter", steps=5, rank=4,
                       seq_len=32, batch=64, lr=1e-2, on_step=lambda step, loss: losses.append(loss))
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] - 0.2
    adapter = lora.read_adapter(out)
    assert adapter.rank == 4 and set(adapter.config.target_modules) >= {"q_proj", "down_proj"}
    assert json.loads((out / "training.json").read_text())["steps"] == 5
    assert not (tmp_path / "adapter.tmp").exists()
