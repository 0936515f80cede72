"""What a run leaves on disk: the typed event models (`events`), the append-only event log and
the snapshot (`log`), and replacing a file whole (`atomic`).

May import the base modules only; everything else reads and writes through it.
"""
