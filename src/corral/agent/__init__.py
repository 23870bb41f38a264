"""corral.agent: the node agent (discovery, launch, isolation, enforcement)."""
