"""Alerts (issue 29): per schedule an SLA and failure notifications to webhooks, delivered from the log."""
