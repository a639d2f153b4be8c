"""The shipped training recipes (YAML), installed as package data so that `spatialiq` finds them by name
(`spatialiq recipes show tiny_cpu`, `spatialiq demo`) from any working directory and in any install."""
