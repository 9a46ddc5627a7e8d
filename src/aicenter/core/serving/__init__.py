"""Serving, pure: the autoscaler's decision (``autoscale``). Services, revisions and traffic come with the
inference-services issue."""
