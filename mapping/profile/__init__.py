"""Reading profiles: the model, the readers, discovery, the cache, ranks and the time model."""
