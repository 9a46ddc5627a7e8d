"""Serving, pure: the autoscaler's decision (``autoscale``), the gateway's route table and routing choices
(``routing``), and what a user asks to deploy (``spec``)."""
