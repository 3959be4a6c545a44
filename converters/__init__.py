"""The converter chain's stages (imported as ``edgeopt.converters``).

See :mod:`edgeopt.converters.base` for the Stage/Backend contract and
:mod:`edgeopt.converters.registry` for the one registry of stages and backends.
"""
