"""Integration tests of the gateway: REST, views, the reviewers' page server."""
