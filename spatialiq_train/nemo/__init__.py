"""NeMo-RL backend: config generation and key checks (CPU-only, no NeMo-RL import), driver, data and environments.

Nothing here imports nemo_rl, ray or torch at module import time.
"""
