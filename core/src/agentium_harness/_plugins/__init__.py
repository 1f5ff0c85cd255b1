"""Plugin machinery: hook specifications, adapter specs and the registry."""
