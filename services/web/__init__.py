"""The operators' web console (issue 29): server-rendered pages over the services' gRPC APIs, with the
signed-in user's own credentials. `sluice standalone --web-port P`, or `sluice serve web`."""
