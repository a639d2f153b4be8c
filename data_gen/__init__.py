"""data_gen package."""
