"""Built-in embedded adapters, registered through the same hooks as external plugins."""
