"""Releasing trained checkpoints: a Hugging Face folder with a model card and SHA256SUMS (``spatialiq release``).

``checkpoint``: the weights (LoRA merged), processor with the recipe's pixel budget, tokenizer and chat
template. ``card``: the model card text, a pure function of the recipe, the data manifest and the eval
metrics. ``checksums``: SHA256SUMS written and verified. ``hub``: the thin ``--push`` to the Hugging Face Hub.
``release``: the orchestration and ``--verify``. A backend-layer package: it may use eval and the trainers.
"""
