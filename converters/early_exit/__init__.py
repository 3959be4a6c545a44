"""Early exits added to a trained classifier: the ``early_exit`` stage (``stage.py``)."""
