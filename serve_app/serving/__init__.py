"""What each endpoint does, without HTTP: the gateway object the api layer calls, the model
catalogue, embeddings, health and the routing start-up. Testable in process with a fake fleet."""
