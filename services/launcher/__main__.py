"""`python -m sluice_services.launcher`: the launcher service alone (embedded adapters under --data-dir)."""
from sluice_services.cli.serve import serve_main

serve_main("launcher")
