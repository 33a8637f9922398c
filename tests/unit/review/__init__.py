"""Unit tests of what reviewers read."""
