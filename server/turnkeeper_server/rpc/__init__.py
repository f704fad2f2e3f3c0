"""gRPC layer (servicers, interceptors). Servicers: validate the request, call the
engine (or the operation both surfaces share, `turnkeeper_server.operations`), build
the response."""
