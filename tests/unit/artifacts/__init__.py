"""Unit tests of the artifact stores."""
