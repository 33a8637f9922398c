"""Unit tests of the kube seam and its fake."""
