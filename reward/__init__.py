"""reward package."""
