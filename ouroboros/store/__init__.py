"""What a run leaves on disk: the typed event models (`events`), the append-only event log
(`log`), the run's state, versioned and written whole (`state_file`), the log's closed
segments and manifest (`segments`), the one fold of the events that every reader reads
(`summary`), the tool results' full texts (`observations`), how much history is kept
(`retention`), replacing a file whole (`atomic`), and reading the harness's own files
without following a link (`files`).

May import the base modules only; everything else reads and writes through it.
"""
