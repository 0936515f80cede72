"""Terminal views of a run: the live dashboard (`dashboard`: what it knows, from events;
`render` and `live`: drawing it), one line per event (`plain`, `records`), `status`, `runs`,
`stats` and `chart`, `health` (`status --json`), `config_view`, `follow` (a log another
process writes), `captions` (the demo's narration) and `sanitize`. They read events and the
config; they never drive the run.

May import `store`, `config` and the base modules; never `loop` (the exceptions left today
are named in tests/test_architecture.py).
"""
