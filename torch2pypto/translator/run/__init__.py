"""The ``translate`` command: gathering trees, worker processes, config, summaries and reports."""
