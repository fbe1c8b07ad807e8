"""Objects behind an HTTP API: the operation ledger (a job kind of the leased queue)
and the object strategy of the window deleter."""
