"""Helpers shared by every test folder: PostgreSQL test databases, test settings and live servers."""
