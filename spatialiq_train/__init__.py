"""spatialiq-train: RLVR training of vision-language models on the Spatial-IQ block-counting hierarchy.

``spatialiq_train.core`` holds the vocabulary (dataset, prompts, tasks, parsing, recipes, ...); ``cli``, ``train``,
``nemo``, ``release`` and ``lab`` sit on top of it and of ``data_gen``, ``reward`` and ``eval``. Importing this
package is light: no training engine, renderer or dataset library is loaded.
"""

from spatialiq_train.core.versions import PROJECT_VERSION as __version__

__all__ = ["__version__"]
