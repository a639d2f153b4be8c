"""Training backends on TRL: data loading, SFT, GRPO/DAPO with dynamic sampling, the two-phase dapo-tight run.

Heavy libraries (torch, transformers, trl, datasets) are imported inside functions, never at import time.
"""
