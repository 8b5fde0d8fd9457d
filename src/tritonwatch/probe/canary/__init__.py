"""The canary: one model's requests on time, sent by the engine or the libraries."""
