"""The reward lab: analyse rewards on sampled completions (``spatialiq reward analyze``), probe them with crafted
completions, and sweep recipe variants (``spatialiq sweep plan|run|report``). docs/rewards.md, "Running a reward
experiment", walks through it.
"""
