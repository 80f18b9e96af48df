"""Themisto: a benchmark of whether language models can use Jupyter runtime state."""

__version__ = "0.1.0"
