"""Re-export: the train/benchmark split and the train partitions live in the core (spatialiq_train.splits),
since traces, eval and the reward lab all decide them the same way."""

from spatialiq_train.splits import *  # noqa: F403
from spatialiq_train.splits import _unit, part_of, partition_of, split_of  # noqa: F401
