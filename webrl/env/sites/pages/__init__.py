"""The embedded websites, one module per site, each exposing a `routes` table (see `routing.py`)."""
