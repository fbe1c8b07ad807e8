"""The Retention view in the Airflow UI: server-rendered pages on the api-server.

``app`` has the routes, ``queries`` reads the figures from each policy's
database, ``access`` asks Airflow who may see and do what, ``formatting`` writes
the numbers, and ``templates/`` holds the Jinja2 pages (autoescaped).
"""
