"""gRPC servicers: validate the request, call the store, build the response."""
