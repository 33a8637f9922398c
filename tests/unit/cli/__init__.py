"""Unit tests of the tooladapter command."""
