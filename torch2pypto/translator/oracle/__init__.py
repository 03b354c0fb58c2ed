"""Output checks the tests and the corpus harness apply to every translation."""
