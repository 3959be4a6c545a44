"""What runs an artifact: runners and the measurement core.

This package is shipped to devices as-is (``remote/deploy.py`` copies it as
``edgeopt_runtime``), so it depends on the standard library, numpy and one
runtime only, and imports its own modules *relatively*. Never import the rest of
edgeopt (pydantic, rich, onnx…) from here at import time. Two host-side helpers
that nothing on a device calls read the registry when called: ``run_fn``'s ONNX
path and ``reference`` (which backend is the reference is declared once, in the
registry, which is not shipped).
"""
