"""tooladapter: the governed gateway through which AI agents call tools."""

GROUP = "tooladapter.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

__all__ = ["API_VERSION", "GROUP", "VERSION"]
