"""The core vocabulary every other part of the project builds on.

Dataset layout and splits, views, benchmark prompts, the task catalogue, completion parsing, the image processor
rule, recipes, metric names, trace rows, errors, file I/O, weight loading and engine versions. Modules here import
nothing from the project outside this package (``lint-imports`` checks it); ``data_gen``, ``reward`` and ``eval``
import only from here, and the orchestrators (``cli``, ``train``, ``nemo``, ``release``, ``lab``) sit on top.
"""
