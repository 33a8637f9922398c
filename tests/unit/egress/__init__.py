"""Unit tests of egress rules and the egress proxy."""
