"""What the toolkit is developed and measured on: real models rebuilt from PyPI wheels, random
models with real shapes, and the files wheels carry (evaluation sets)."""
