"""The model's context window: what fills it and what to do about it.

`policy` makes every decision (zones, masking, carryover, fitting) as pure functions;
`conversation` is the messages and the notes the harness writes into them; `ledger` holds
token estimates and measured sizes; `sizes` keeps running sums so a turn costs what changed;
`belief` judges how big the server's window really is. No I/O. May import `config` and the
base modules only.
"""
