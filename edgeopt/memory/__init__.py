"""Memory: what a model needs on a device (predicted), what it took here (measured), and the gate.

:mod:`.plan` lays the activations out like TFLite Micro's and ExecuTorch's planners (greedy by size over
tensor lifetimes); :mod:`.predict` adds the weights in the artifact's precision and each runtime's base
cost (:mod:`.facts`); :mod:`.measure` reads a child process's peak resident memory; :mod:`.gate` holds
an artifact against the profile's budget.
"""
