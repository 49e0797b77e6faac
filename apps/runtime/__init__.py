"""What a service process knows about itself, below every app: for now, whether this worker was
told to stop (``apps.runtime.shutdown``). No models, not a Django app."""
