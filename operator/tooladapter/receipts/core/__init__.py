"""The pure core of receipts: building, signing, chaining, checking, indexing, events."""
