"""`memlens view`: the browser viewer (server in server.py, API data in data.py, page in static/)."""
