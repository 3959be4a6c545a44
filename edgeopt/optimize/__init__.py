"""``edgeopt optimize``: the progressive path (fusion, INT8, pruning, backends) as an automatic search.

API: :func:`edgeopt.optimize.optimizer.optimize`; :mod:`.pareto` has the Pareto front.
"""
