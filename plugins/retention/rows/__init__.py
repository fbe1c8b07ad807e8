"""Rows: the cutoff, planning immutable windows, and deleting a window's rows.

``cutoff`` → ``planner`` (using ``target`` and ``windows``) → a
:class:`~retention.rows.lifecycle.WindowDeleter` per window
(``deleter.RowDeleter`` here, ``objects.deleter.ObjectDeleter`` for remote policies).
"""
