"""Unit tests of the operator process: settings, census, tracing, memory, leadership."""
