"""Where the toolkit's pieces live: the checkout, the vendored source, builds and model cache."""

from __future__ import annotations

import os
from pathlib import Path

# The checkout this package was installed from (editable install); AWQ2GGUF_ROOT overrides it.
ROOT = Path(os.environ.get("AWQ2GGUF_ROOT", Path(__file__).resolve().parents[2]))
VENDOR_SRC = ROOT / "vendor" / "llama.cpp"
BUILD_DIR = ROOT / "build"
# Generated models (synthetic GGUFs and their quantized copies); AWQ2GGUF_MODELS overrides it.
MODELS_DIR = Path(os.environ.get("AWQ2GGUF_MODELS", ROOT / "models"))
# Downloaded wheels and files extracted from them; AWQ2GGUF_CACHE overrides it.
CACHE_DIR = Path(os.environ.get("AWQ2GGUF_CACHE", ROOT / ".cache"))
# Evaluation text (WikiText-2 raw test). A checkout beside ../shared finds it there; anywhere
# else set AWQ2GGUF_EVAL_TEXT or pass --text.
DEFAULT_EVAL_TEXT = Path(os.environ.get("AWQ2GGUF_EVAL_TEXT",
                                        ROOT.parent / "shared" / "data" / "wikitext-2-raw-test.txt"))
