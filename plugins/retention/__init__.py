"""Retention cleanup for Apache Airflow 3: policies, planning, deleting, reconciling.

Layers, each importing only the ones before it:

1. ``paths``, ``policy`` (the model, the loader, the JSON Schema), ``db``
   (connections, bounded transactions, SQL files, migrations), ``metrics``
   (sent by every layer through the sink the Airflow layer installs);
2. ``runs`` (the run lease, the run-status rule), ``rows`` (cutoff, planner,
   windows, the window lifecycle, the row deleter) and ``queue`` (the leased
   queue, its worker, classification, HTTP, limiter);
3. ``objects`` (remote operations: a job kind, and the object deleter) and
   ``events`` (the outbox job kind, inbound hints);
4. ``evidence`` (reconcile, explain, replay, audit purge) and ``alerts`` (the
   rules and messages, sending each alert once);
5. ``airflow`` (connections through hooks, task steps, the DAG factory, the
   plugin's API) and ``cli``: with ``ui``, the only modules that import Airflow;
6. ``ui`` (the Retention view), which builds on ``airflow`` and never the reverse.

``summary`` (the typed run summary), ``progress`` and ``stopping`` are small
shared modules below the layers that use them.
"""
