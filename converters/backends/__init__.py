"""Backends: the last stage of the chain, one package each (`<name>/`: its stage, quantizer, search, helpers,
pre-flight check and per-layer profiler), named in the registry's ``BACKEND_MODULES``."""
