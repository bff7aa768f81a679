"""kern-serve: an OpenAI-compatible HTTP server on kern-run's batched engine."""
