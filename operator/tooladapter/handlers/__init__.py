"""kopf wiring: handlers receive events and hand them to the flows and workers."""
