"""Terminal views. They read events; they never drive the run."""
