"""`python -m sluice_services.matcher`: the matcher service alone (embedded adapters under --data-dir)."""
from sluice_services.cli.serve import serve_main

serve_main("matcher")
