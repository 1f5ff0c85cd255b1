"""The runtime engine: run loop, resident history and eviction, resources."""
