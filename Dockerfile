# Astro project image: `astro dev start` builds this, `astro deploy` ships it.
#
# Astro Runtime 3.x images are tagged <Airflow major.minor>-<Runtime patch>:
# runtime:3.3-N carries Airflow 3.3.x, and the Runtime patch number N is not the
# Airflow patch (Runtime patches can carry early fixes). The project pins
# apache-airflow==3.3.2 (requirements-dev.txt); the check below fails the build,
# naming both versions, if this image carries another Airflow. To move on, pick
# the runtime:3.3-N whose `airflow version` is the pinned one, or change the pin
# and AIRFLOW_VERSION together (a unit test keeps them equal).
#
# The base image's ONBUILD steps copy this folder (less .dockerignore), install
# packages.txt with apt (empty: psycopg[binary] brings its own libpq, and nothing
# else needs a system library) and requirements.txt with pip. Its default Python is newer
# than the 3.11 the project is tested on; the code uses nothing newer than 3.11.
FROM astrocrpublic.azurecr.io/runtime:3.3-2

ARG AIRFLOW_VERSION=3.3.2
RUN python -c "import sys, airflow; v = airflow.__version__; \
sys.exit(0 if v == '${AIRFLOW_VERSION}' else f'this image carries Airflow {v}, the project pins ${AIRFLOW_VERSION}: change the FROM tag (or the pin and AIRFLOW_VERSION)')"
