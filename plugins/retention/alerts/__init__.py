"""Alerts: which alerts a finished run fires, what they say, and sending each one once."""
