"""Remote objects: the operation ledger (a job kind of the leased queue) and the object
strategy of the window deleter. Read in this order: ``keys`` (an operation, its key, safe
paths), ``decide`` (pure), ``enqueue``, ``finish`` (the atomic finish), ``kind`` (the
kind without a transport, and the HTTP one), ``deleter``."""
