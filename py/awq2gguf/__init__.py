"""awq2gguf: AWQ-searched all-Q4_0 GGUFs and a patched llama.cpp for CPUs."""

__version__ = "0.1.0"
