"""What SREs read and repair, shared by the offline commands (services/cli/sre.py: `sluice dlq`,
`sluice log`) and their online gRPC faces (DeadLetters, EventLog, served by the registry)."""
