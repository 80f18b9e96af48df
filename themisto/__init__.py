"""Themisto: a benchmark of whether language models can use Jupyter runtime state."""

__version__ = "0.1.0"  # the one declaration: setup.cfg reads it (attr:), provenance and --version print it
