"""Data planes: the SSH gateway to notebooks (and, later, the notebook and inference proxies).

No database access per request or per byte: callers hand in callbacks that do their lookups once per connection.
"""
