"""Runs: one run of a policy at a time (the run lease) and the rule that decides a run's status."""
