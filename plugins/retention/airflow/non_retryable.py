"""``@non_retryable(...)``: the errors a retry cannot mend fail the task at once.

Airflow retries a failed task (two retries with backoff in every policy DAG).
Some errors say that waiting changes nothing: a cutoff in the future, another
run holding the run lease, refused credentials, a dirty reconcile. Those become
``AirflowFailException`` (no retry), keeping their message and their cause;
every other error is left to the retries.

The wrapper keeps the function's name, docstring and signature
(``functools.wraps``): ``@task`` takes the task id from the name and binds
``expand_kwargs`` and XCom arguments through the signature, so it goes under
``@task``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from airflow.sdk.exceptions import AirflowFailException

P = ParamSpec("P")
R = TypeVar("R")


def non_retryable(
    *errors: type[Exception], prefix: str = ""
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn ``errors`` raised by the decorated function into ``AirflowFailException``
    (``prefix`` + their message, chained), so the task fails without a retry."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def failing_at_once(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return function(*args, **kwargs)
            except errors as final:
                raise AirflowFailException(f"{prefix}{final}") from final

        return failing_at_once

    return decorate
