"""The Retention view in the Airflow UI: server-rendered pages on the api-server.

``app`` has the routes (and builds the plugin's whole app: the JSON API plus the
pages), ``queries`` reads the figures from each policy's database, ``formatting``
writes the numbers, and ``templates/`` holds the Jinja2 pages (autoescaped). What
the pages ask Airflow (``retention.airflow.access``) and the lookups they share
with the JSON API (``retention.airflow.lookup``) live in the Airflow layer: this
package imports it, never the reverse.
"""
