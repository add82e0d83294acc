"""`python -m sluice_services.registry`: the registry service alone (embedded adapters under --data-dir)."""
from sluice_services.cli.serve import serve_main

serve_main("registry")
