"""The receipts as one service: the I/O around the pure core (`receipts.core`).

`writer` stores a call's receipt (signed, as the next link of its namespace incarnation's
chain, indexed; the chain is also the outbox of the integration events) from one input,
`ReceiptInput`; `storing` retries the artifact store until it takes a trip of writes;
`reader` reads receipts, chains and keys back, for the CLI and the gateway alike.
"""
