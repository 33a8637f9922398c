"""Pure builders of sandbox pods: the Job of a lease (`job`) and warm pods (`warm`).

They return plain dicts; `kube.sandbox` and `kube.warm` send them, and the executors run
calls in them.
"""
