"""Integration tests of the tooladapter command."""
