"""corral.controller: the controller daemon (API, store, scheduling loop, agent hub)."""
