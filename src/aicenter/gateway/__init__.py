"""Data planes: the notebook proxy (HTTP + WebSocket) and the SSH gateway. No database access per request."""
