"""Unit tests of sandbox pods: Jobs, warm pools, attempt workspaces."""
