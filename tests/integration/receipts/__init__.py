"""Integration tests of receipts: record, signing, chain, index, events."""
