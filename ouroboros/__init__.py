"""Ouroboros: run an LLM agent indefinitely by managing its context window."""

__version__ = "0.1.0"
