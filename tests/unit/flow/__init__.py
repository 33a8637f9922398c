"""Unit tests of one call's walk through the flow."""
