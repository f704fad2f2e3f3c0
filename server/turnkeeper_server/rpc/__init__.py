"""gRPC layer (servicers, interceptors, request limits, proto conversion). Servicers: validate the request, call the store, build the response."""
