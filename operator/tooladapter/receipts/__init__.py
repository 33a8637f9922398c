"""Receipts: the audit record of every call, signed, chained, indexed and announced.

`core` is pure (the pipeline's layer): the record (`record`), its DSSE signature
(`signing`) and keys (`keyring`), the per-namespace chain (`chain`), checks of bytes
against their reference (`check`), the index readers merge with stored calls (`index`),
and the integration events as CloudEvents (`cloudevents`). The I/O lives above `kube/`
and `artifacts/`.
"""
