"""Unit tests of kopf wiring: start-up, health, reconcilers."""
