"""`python -m sluice_services.alerts`: the alerts service alone (embedded adapters under --data-dir)."""
from sluice_services.cli.serve import serve_main

serve_main("alerts")
