"""Activation-aware weight quantization (AWQ) searched against ggml's exact Q4_0 quantizer."""
