"""Integration tests of the artifact stores."""
