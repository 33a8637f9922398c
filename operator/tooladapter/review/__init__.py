"""What a person reviewing a call reads, as plain data: pure rendering, no I/O.

`texts` (pending approvals and their decisions), `shown` (arguments exactly as they will
run), `argdiff` (what changed between two calls), `readout` (how the doors read an ended
call), `page` (the reviewers' page).
"""
