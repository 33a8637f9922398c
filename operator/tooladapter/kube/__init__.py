"""The thin Kubernetes layer: the only code in tooladapter that calls the API server."""
