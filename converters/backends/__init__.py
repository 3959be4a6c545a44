"""Backends: the last stage of the chain, one module each."""
