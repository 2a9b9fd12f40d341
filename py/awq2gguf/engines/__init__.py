"""Other AWQ implementations awq2gguf can run in place of its own search, for comparison."""
