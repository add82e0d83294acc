"""The `sluice` command: the library's client commands (sluice.cli.main) plus the commands that need
the services: `standalone` and `serve` (serve.py), and the offline operator commands `log`, `dlq`
(sre.py), `replay` and `rebuild`."""
