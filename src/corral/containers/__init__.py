"""Container images for jobs: what a submission asks for (``spec``), shared by the front
ends, the controller and the agent (which runs it: ``corral.agent.container``)."""
