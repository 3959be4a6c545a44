"""``edgeopt pipeline``: firmware builds from an ``edgeopt.yaml`` (targets, gates, dist/, cache).

API: :func:`edgeopt.pipeline.run.run_pipeline`, :func:`edgeopt.pipeline.init.init_recipe`,
:func:`edgeopt.pipeline.recipe.load_pipeline_recipe`. Nothing heavy is imported here.
"""
