"""Evidence: reconcile a run, explain one operation, replay dead letters, purge old evidence."""
