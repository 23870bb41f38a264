"""The web dashboard and portal, served by the controller (``/ui/``).

A single static page with vanilla JavaScript over the controller's REST API plus a few
JSON routes of its own (``corral.web.routes``): the queue with filters, a job's detail
with "why pending" in plain words, nodes and their allocation, utilization over time,
fair share by account, and a submit form (the "custom portal" path) that submits as the
authenticated caller. No build step and no third-party front-end code.

The browser authenticates with a token from ``corral token`` (pasted once into the page,
or passed as ``/ui/#token=...``), kept in the browser's local storage and sent as
``Authorization: Bearer``; no cookies, so no cross-site request forgery.

``router(ctl, identity)`` returns the FastAPI ``APIRouter``; ``mount(app, ctl, identity)``
adds it to the controller's app.
"""

from corral.web.routes import mount, router

__all__ = ["mount", "router"]
