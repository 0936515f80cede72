"""The model's context window: what fills it and what to do about it.

`policy` makes every decision (zones, masking and what a round is worth, the budget) as pure
functions; `manager` holds the ContextManager, the one object the loop talks to, which
carries them out (fitting a request, taking in a result, the decision after a turn);
`conversation` holds the one owner of the messages (Conversation: append, mask, drop,
replace; the bookkeeping that follows each change) and the notes the harness writes into
them; `ledger` holds token estimates and measured sizes; `sizes` keeps the running sums the
owner keeps in step, so a turn costs what changed;
`belief` judges how big the server's window really is; `plain` gives its dataclasses as the
state saves them. No I/O. May import `config` and the
base modules only.
"""
