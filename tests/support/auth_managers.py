"""An auth manager with per-DAG rights, for tests of who may replay what.

Airflow's ``SimpleAuthManager`` grants by role alone (a ``user`` may trigger every
DAG); FAB and other production auth managers can refuse one DAG. This subclass
refuses everybody but admins the right to trigger the DAGs named (comma-separated)
in ``$RETENTION_TEST_UNTRIGGERABLE`` and otherwise answers as ``SimpleAuthManager``.
Configure it with ``AIRFLOW__CORE__AUTH_MANAGER=tests.support.auth_managers.PerDagAuthManager``.

``NameBlindAuthManager`` stands for the auth managers that cannot look a user up by
name outside a request (FAB, the managed deployments'): the replay task asks it nothing.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

UNTRIGGERABLE_ENV = "RETENTION_TEST_UNTRIGGERABLE"


class PerDagAuthManager(SimpleAuthManager):
    """``SimpleAuthManager``, but only admins may create runs of the DAGs in
    ``UNTRIGGERABLE_ENV``."""

    def is_authorized_dag(
        self,
        *,
        method: Any,
        user: Any,
        access_entity: Any = None,
        details: Any = None,
    ) -> bool:
        refused = set(filter(None, os.environ.get(UNTRIGGERABLE_ENV, "").split(",")))
        if method == "POST" and details is not None and details.id in refused:
            return str(user.role or "").upper() == "ADMIN"
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )


def viewers_only(manager: Any, name: str) -> Any:
    """A ``$RETENTION_REPLAY_USER_LOOKUP`` function: everybody is a viewer of ``manager``."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return SimpleAuthManagerUser(username=name, role="VIEWER")


class NameBlindAuthManager:
    """Not a ``SimpleAuthManager``: the replay task cannot look its users up by name."""
