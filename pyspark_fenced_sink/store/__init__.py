"""Object stores with put-if-absent, found by URI scheme (store.registry)."""
