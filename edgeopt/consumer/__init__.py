"""What a deployer gets: the artifact loaded through its runtime's plain API with only what the artifact carries.

:mod:`.writer` writes ``load.py`` and ``load.cc`` beside the model from the manifest's ``runtime.settings`` (the
settings edgeopt's runner applies, in the runtime's own terms); :mod:`.check` runs ``load.py`` in a subprocess on
the check samples against edgeopt's runner (the consumer check of every convert) and records what a bare load
(the runtime's defaults) gives; :mod:`.model` is the manifest's typed ``consumer_check``.
"""
