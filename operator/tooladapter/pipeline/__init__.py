"""The pipeline stages as plain functions over plain data.

Nothing in this package talks to Kubernetes, the network or the file system: every rule
of the pipeline (validation, policy, classification, approval binding, shell checks,
sanitization, receipts, the state machine) is a pure function, testable without a
cluster. The kopf handlers fetch the inputs, call these, and write the results.
"""
