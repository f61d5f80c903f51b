"""`windtunnel tasks` commands (filled in by the tasks work)."""
