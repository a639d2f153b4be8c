"""The NeMo-RL backend (pinned to NeMo-RL v0.7.0, container nvcr.io/nvidia/nemo-rl:v0.7.0).

Config generation (keys, recipe values, the generated YAML) and the run side (data processor, reward
environments, driver, checkpoint conversion) live in this package. NeMo-RL, vLLM and Ray are imported inside
functions only, so importing the package stays light and works without NeMo-RL installed.
"""
