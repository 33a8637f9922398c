"""Unit tests of executors: settlement and call limits."""
