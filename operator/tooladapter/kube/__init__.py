"""The thin Kubernetes layer: the only code in tooladapter that calls the API server.

Importing it first puts the lazy `kubernetes_asyncio.client` packages in place (`lean`), so
a process that reaches the client through this layer imports only the API and model
classes it uses."""

from tooladapter.kube import lean

lean.install()
