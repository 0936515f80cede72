"""The run: the outer loop of sessions (start, resume, restart, reload, stop, the end and its
exit code) and one session (ask the model, run its tools, keep the window).

Owns the run's live state (`state.RunState`), its config as it is now
(`live_config.LiveConfig`, replaced whole at a reload) and the order things happen in. May import
`window`, `store`, `server`, `tools`, `sandbox`, `config` and the base modules; never `ui`,
`cli` or rich.
"""
