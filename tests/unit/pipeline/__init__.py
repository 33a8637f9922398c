"""Unit tests of the pipeline's stages."""
