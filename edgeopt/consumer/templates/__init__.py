"""The parts of a generated ``load.py``: one file per runtime (its plain API, numpy, the standard library) and the
command line shared by all (:mod:`.load_common`). :mod:`edgeopt.consumer.writer` joins them with the artifact's
settings; nothing here imports edgeopt, so the generated file runs where edgeopt is not installed."""
