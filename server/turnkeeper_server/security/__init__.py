"""Security: bearer-token authentication and authorization, TLS and the exposed-port rule."""
