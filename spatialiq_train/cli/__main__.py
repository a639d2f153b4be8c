"""`python -m spatialiq_train.cli ...` is `spatialiq ...` (used where the console script is not installed, e.g. in
the NeMo-RL container, where the project is on PYTHONPATH through the mounts)."""

from spatialiq_train.cli import main

if __name__ == "__main__":
    main()
