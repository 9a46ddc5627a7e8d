"""Contract suites: one set of tests that every implementation of a protocol must pass."""
