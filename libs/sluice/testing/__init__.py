"""Helpers for tests and local development (throwaway servers); not used by the services."""
