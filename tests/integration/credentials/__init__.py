"""Integration tests of brokered credentials: where each value goes, and where it never shows."""
