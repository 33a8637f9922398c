"""Unit tests of what ships: chart, CRDs, manifests, images, docs."""
