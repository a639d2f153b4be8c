"""spatialiq-train core: task catalogue, benchmark prompts, completion parsing, recipes and the CLI.

Importing this package is light: no training engine, renderer or dataset library is loaded.
"""

__version__ = "0.1.0"
